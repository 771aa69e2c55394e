"""Run detail (enter on a task): the worker's live stream, gate output, review findings, diff stat, logs.

The stream is the run's normalised `.jsonl` (providers/contract.py events), followed live the
same way as the event log. Opening a long run reads only the last 256 KB of it. The screen is drawn
from the store at once; the gate, review and diff stat (the event index, git) fill in from a worker
thread, so opening it never waits on either. What each section says is in run_sections.py.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.work import TASK_ACTIVE, RunRow, TaskRow, run_log_paths
from pilothouse.tui import format as fmt
from pilothouse.tui.live import Follower, LineTailer
from pilothouse.tui.screens import run_sections as sections
from pilothouse.tui.widgets.footer import SteadyFooter
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, RichLog, Static

if TYPE_CHECKING:
    from pilothouse.core.stops.problems import Problem
    from pilothouse.tui.app import CockpitApp

STREAM_TAIL_BYTES = 256 * 1024
# the events after which the side (gate, review, diff stat) is read again
_SIDE_CHANGES = {"gate.finished", "review.finished", "merge.finished", "run.started", "run.finished"}


class RunsTable(KeyedTable):
    COLUMNS = (Col("run", "run", 26, flex=1), Col("role", "role", 8), Col("mode", "mode", 7),
               Col("state", "state", 8), Col("verdict", "verdict", 9), Col("tokens", "tokens", 6))


_RESULT_RE = re.compile(r"<!--RESULT-->.*?(<!--/RESULT-->|$)", re.DOTALL)


class RunLines(Message):
    """New lines wait in the run's follower."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class RunDetail(Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="detail.back"),  # q goes back everywhere but the dashboard
        Binding("f", "follow", "Follow", id="detail.follow"),
        Binding("left_square_bracket", "run(-1)", "Prev run", id="detail.prev"),
        Binding("right_square_bracket", "run(1)", "Next run", id="detail.next"),
        # the task's own problem is answered here, without going back to the dashboard
        *(Binding(key, f"reply('{reply}')", reply.capitalize(), id=f"detail.{reply}")
          for reply, key in fmt.REPLY_KEYS.items()),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.job = ""
        self.task_id: str | None = ""  # None: the job's own runs (its planner, a combined review)
        self.follower: Follower | None = None
        self._side_asked = 0  # reads of the side started; only the newest one's answer is drawn
        self._reset()

    def _reset(self) -> None:
        """Forget the task shown: its run, the stream's totals and text, its side."""
        self.run_id: str | None = None
        self.totals: dict[str, int] = {}
        self._text = ""
        self._text_ts: str | None = None
        self._waiting = False  # the stream shows "waiting for" the run's log
        self._task_row: TaskRow | None = None
        self._side_asked += 1  # a read for the task shown before is not drawn
        self.side_loaded = False  # gate, review and diff stat have been drawn once
        self._want_run: str | None = None  # the run asked for (enter on a timeline bar)

    def open(self, job: str, task: str | None, run: str | None = None) -> None:
        """Show `task` (at `run`, else its current or last run), or with task None the job's own runs
        (a timeline's planning bar: the assigner's). One instance serves every open
        (installed once, tui/actions.py): opening is a content update, not a new screen whose widgets
        are built, styled and laid out again."""
        self.job, self.task_id = job, task
        if not self.is_mounted:
            self._want_run = run
            return  # on_mount draws it
        self._stop_follow()
        self._reset()
        self._want_run = run
        log = self.query_one("#stream", RichLog)
        log.clear()
        log.auto_scroll = True
        log.border_title = log.border_subtitle = ""
        for part in ("#gate", "#review", "#diff", "#logs"):
            self.query_one(part, Static).update("")
        self.query_one("#side").scroll_home(animate=False)
        self._draw()

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="detail-head")
        yield RunsTable(id="runs", classes="panel")
        with Horizontal(id="detail-body"):
            # min_width 1: wrap at the pane, not at RichLog's 78-column default (cut at 120-129 columns)
            yield RichLog(id="stream", classes="panel", max_lines=3000, wrap=True, markup=False, min_width=1)
            with VerticalScroll(id="side", classes="panel"):
                yield Static(id="gate")
                yield Static(id="review")
                yield Static(id="diff")
                yield Static(id="logs")
        yield SteadyFooter()

    def on_mount(self) -> None:
        from textual.css.query import NoMatches

        try:
            side = self.query_one("#side")
        except NoMatches:
            # composed ahead of its first open (prepare_run_detail) while the app quits: its children
            # were never mounted, and there is nothing to draw (the busy run quit a replay just then)
            return
        side.border_title = "gate · review · diff · logs"
        if self.job:  # mounted ahead of its first open (tui/actions.py) has no task yet: open() draws it
            self._draw()
        self.set_interval(1, self._tick)
        self.call_after_refresh(self.cockpit.settled)  # built once, kept for every open

    def _draw(self) -> None:
        self.query_one("#runs").border_title = f"runs of {self.task_id}" if self.task_id is not None \
            else "the job's own runs"
        self.refresh_all()
        self.query_one("#stream").focus()

    def _tick(self) -> None:
        task = self._task_row
        if task is not None and task.state in TASK_ACTIVE and self.is_current:
            self._head(task)  # a running task's elapsed time goes on between events

    def on_screen_suspend(self) -> None:
        if self not in self.app.screen_stack:  # closed (not covered by a dialog): the stream waits for the next open
            self._stop_follow()

    def on_unmount(self) -> None:
        self._stop_follow()

    # --- data -----------------------------------------------------------------------------------

    def refresh_all(self, side: bool = True) -> None:
        """Re-read the task and its runs; `side` also re-reads gate, review and diff (costlier)."""
        q = self.cockpit.queries
        if self.task_id is None:
            task, runs = None, (q.job_runs(self.job) if q else [])
        else:
            task = q.task(self.job, self.task_id) if q else None
            runs = q.runs(self.job, self.task_id) if q else []
            if task is None:
                self.query_one("#detail-head", Static).update(Text(f"{self.job}/{self.task_id}: no such task"))
                return
        table = self.query_one(RunsTable)
        rows: list[tuple[str, dict[str, Cell]]] = []
        for r in runs:
            verdict = (r.verdict or {}).get("verdict", "")
            rows.append((r.run_id, {"run": r.run_id, "role": r.role, "mode": r.mode,
                                    "state": fmt.state_text(r.state), "verdict": verdict,
                                    "tokens": fmt.tokens(r.tokens, r.usage)}))
        table.set_rows(rows)
        if self.run_id is None:
            asked = self._want_run if any(r.run_id == self._want_run for r in runs) else None
            pick = asked or (task.run_id if task else None) or (runs[-1].run_id if runs else None)
            if pick:
                table.select_key(pick)
                self.show_run(pick)
        self._head(task)
        if side:
            self._side(task, runs)

    def _head(self, task: TaskRow | None) -> None:
        self._task_row = task
        q = self.cockpit.queries
        if task is None:
            run = q.run(self.run_id) if q is not None and self.run_id else None
            self.query_one("#detail-head", Static).update(
                sections.job_head_text(self.job, run, self.totals, self.cockpit.clock()))
            return
        pauses = q.pauses().get((task.job, task.task), []) if q is not None else []
        self.query_one("#detail-head", Static).update(
            sections.head_text(task, self.run_id, self.totals, self.cockpit.clock(), pauses))

    def _side(self, task: TaskRow | None, runs: list[RunRow]) -> None:
        """The logs at once (paths only); gate, review and diff stat from a worker thread."""
        layout = self.cockpit.layout
        assert layout is not None
        run = next((r for r in runs if r.run_id == self.run_id), None)
        self.query_one("#logs", Static).update(sections.logs_text(layout, run))
        if not self.side_loaded:  # the first look: say it is coming (later reads keep what is shown)
            self.query_one("#gate", Static).update(sections.section("gate", Text("…", style="dim"), first=True))
        self._side_asked += 1
        asked, job, name = self._side_asked, self.job, self.task_id
        app = self.cockpit

        def work() -> None:
            failed: str | None = None
            try:
                found = sections.task_events(layout, job, name)
            except Exception as exc:  # noqa: BLE001 - a damaged index or log: say so in the section
                found, failed = [], f"gate and review unavailable: {exc}"
            if task is None:
                diff = "the job's own runs have no branch of their own"
            elif task.branch or task.worktree:
                try:
                    diff = sections.diff_stat(layout, task)
                except Exception as exc:  # noqa: BLE001
                    diff = f"diff stat unavailable: {exc}"
            else:
                diff = "no branch yet"
            app.call_from_thread(self._show_side, asked, runs, found, failed, diff)

        self.run_worker(work, thread=True, group="side", exit_on_error=False)

    def _show_side(self, asked: int, runs: list[RunRow], found: list[dict[str, Any]], failed: str | None,
                   diff: str) -> None:
        if asked != self._side_asked or not self.is_attached:
            return  # a newer read is under way, or the screen is gone
        gates = [e for e in found if e.get("type") == "gate.finished"]
        reviews = [e for e in found if e.get("type") == "review.finished"]
        gate = Text(failed, style="yellow") if failed else sections.gate_text(gates)
        self.query_one("#gate", Static).update(sections.section("gate", gate, first=True))
        self.query_one("#review", Static).update(sections.section("review", sections.findings_text(runs, reviews)))
        self.query_one("#diff", Static).update(sections.section("diff stat", diff))
        self.side_loaded = True

    # --- the run's stream -----------------------------------------------------------------------

    def show_run(self, run_id: str) -> None:
        if run_id == self.run_id:
            return
        self._stop_follow()
        self.run_id = run_id
        self.totals, self._text, self._waiting = {}, "", False
        log = self.query_one("#stream", RichLog)
        log.clear()
        q = self.cockpit.queries
        run = q.run(run_id) if q else None
        if run is None:
            log.write(Text("no record of this run yet", style="dim"))
            return
        path = run_log_paths(run.provider, run.run_id, run.log)["events"]
        log.border_title = f"activity · {run.role} {run.mode} · {run.provider}" + (f"/{run.model}" if run.model else "")
        # why the run did not complete, where its activity is read (worker words: plain Text, no markup)
        why = (run.verdict or {}).get("reason")
        said = " ".join(f"{(run.verdict or {}).get('verdict', '')}: {why}".split())[:110]
        log.border_subtitle = Text(said) if why else ""
        tailer = LineTailer(path)
        try:
            size = path.stat().st_size
            if size > STREAM_TAIL_BYTES:
                tailer.offset = size - STREAM_TAIL_BYTES
                tailer.inode = path.stat().st_ino
                tailer._partial = b"\x00"  # the first (cut) line is dropped as undecodable
        except FileNotFoundError:
            # a finished run's log will not come: saying "waiting" for it would never end
            said = "waiting for" if run.state == "running" else "this run left no activity log at"
            log.write(Text(f"{said} {fmt.tilde(path)}", style="dim"))
            self._waiting = True
        if self.cockpit.live:
            self.follower = Follower(path, tailer, lambda: self.post_message(RunLines(run_id))).start()
        else:
            self._write(tailer.read_new())

    def _stop_follow(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def on_run_lines(self, message: RunLines) -> None:
        if message.run_id == self.run_id and self.follower is not None:
            self._write(self.follower.take())

    def _write(self, lines: list[dict[str, Any]]) -> None:
        log = self.query_one("#stream", RichLog)
        if lines and self._waiting:  # the log exists now: the "waiting for" line is stale
            log.clear()
            self._waiting = False
        for ev in lines:
            if ev.get("kind") == "text":
                if not self._text:
                    self._text_ts = ev.get("ts")
                self._text += str(ev.get("text", ""))
                continue
            self._flush(log)
            line = fmt.activity_text(ev, self.totals)
            if line is not None:
                log.write(line)
        self._flush(log)
        if self.totals:
            label = fmt.usage_label(self.totals)
            log.border_subtitle = (f"{fmt.tokens(self.totals.get('input', 0), label)} in · "
                                   f"{fmt.tokens(self.totals.get('output', 0), label)} out")
            if self._task_row is not None or self.task_id is None:
                self._head(self._task_row)

    def _flush(self, log: RichLog) -> None:
        # the result block is the contract's, for the supervisor: the side panel shows what it says
        text, results = _RESULT_RE.subn("", self._text)
        if text.strip():
            log.write(fmt.styled(fmt.clock(self._text_ts) + " ", "dim") + Text(" ".join(fmt.words(text).split())))
        if results:
            log.write(fmt.styled(fmt.clock(self._text_ts) + " result handed over", "dim"))
        self._text = ""

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        mine = [e for e in events if e.get("job") == self.job and e.get("task") == self.task_id]
        if any(str(e.get("type", "")).startswith("problem.") for e in mine):
            self.refresh_bindings()  # opened, answered or closed: the reply keys change
        if mine:
            # activity and usage come often: only a gate, a review, a merge or a new run redraws the side
            self.refresh_all(side=any(e.get("type") in _SIDE_CHANGES for e in mine))
            started = [e["run"] for e in mine if e.get("type") == "run.started" and e.get("run")]
            if started:  # a new worker on this task (a resume, a reviewer): follow it
                self.query_one(RunsTable).select_key(started[-1])
                self.show_run(started[-1])

    # --- keys -----------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value:
            self.show_run(event.row_key.value)
            q = self.cockpit.queries
            task = q.task(self.job, self.task_id) if q and self.task_id is not None else None
            if task is not None or self.task_id is None:
                self._head(task)

    def task_problem(self) -> Problem | None:
        """This task's open problem, unless its answer already waits for the supervisor."""
        q = self.cockpit.queries
        if q is None:
            return None
        for p in q.problems():
            if p.job == self.job and p.task == self.task_id:
                return None if q.replies(p.code, waiting=True) else p
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reply":
            problem = self.task_problem()
            return problem is not None and bool(parameters) and parameters[0] in problem.replies
        return True

    def action_reply(self, reply: str) -> None:
        problem = self.task_problem()
        if problem is not None and reply in problem.replies:
            self.cockpit.answer(problem, reply)

    def action_follow(self) -> None:
        log = self.query_one("#stream", RichLog)
        log.auto_scroll = True
        log.scroll_end(animate=False)

    def action_run(self, step: int) -> None:
        table = self.query_one(RunsTable)
        if table.row_count:
            table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + step)))
