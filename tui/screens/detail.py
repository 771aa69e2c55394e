"""Run detail (enter on a task): the worker's live stream, gate output, review findings, diff stat, logs.

The stream is the run's normalised `.jsonl` (providers/contract.py events), followed live the
same way as the event log. Opening a long run reads only the last 256 KB of it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.work import TASK_ACTIVE, RunRow, TaskRow, run_log_paths
from pilothouse.tui import format as fmt
from pilothouse.tui.live import Follower, LineTailer, scan_back
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, RichLog, Static

if TYPE_CHECKING:
    from pilothouse.core.stops.problems import Problem
    from pilothouse.tui.app import CockpitApp

STREAM_TAIL_BYTES = 256 * 1024


class RunsTable(KeyedTable):
    COLUMNS = (Col("run", "run", 26, flex=1), Col("role", "role", 8), Col("mode", "mode", 7),
               Col("state", "state", 8), Col("verdict", "verdict", 9), Col("tokens", "tokens", 6))


_RESULT_RE = re.compile(r"<!--RESULT-->.*?(<!--/RESULT-->|$)", re.DOTALL)


class RunLines(Message):
    """New lines wait in the run's follower."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


def gate_text(events: list[dict[str, Any]]) -> Text:
    if not events:
        return Text("no gate has run for this task yet", style="dim")
    ev = events[-1]
    data = ev.get("data") or {}
    ok = data.get("passed", data.get("exit_code") == 0)
    out = fmt.styled(f"{fmt.clock(ev.get('ts'))} ", "dim")
    out.append(f"{data.get('level') or data.get('gate') or 'gate'} ", style="bold")
    out.append("passed" if ok else "failed", style="green" if ok else "bold red")
    if data.get("command"):
        out.append(f"\n$ {data['command']}", style="dim")
    if "exit_code" in data:
        out.append(f"  (exit {data['exit_code']})", style="dim")
    counts = data.get("counts")
    if isinstance(counts, dict):
        out.append(f"\n{counts_line(counts)}", style="bold")
    tail = data.get("output_tail") or data.get("output") or data.get("tail") or ""
    for line in str(tail).rstrip().splitlines()[-15:]:
        out.append(f"\n{line}")
    return out


def counts_line(counts: dict[str, Any]) -> str:
    """'9 tests: 3 passed · 2 failed · 2 skipped · 1 xfailed · 1 errors (junit)', zeros left out."""
    parts = [f"{counts[k]} {k}" for k in ("passed", "failed", "skipped", "xfailed", "errors")
             if isinstance(counts.get(k), int) and counts[k]]
    source = f" ({counts['source']})" if counts.get("source") else ""
    return f"{counts.get('collected', 0)} tests: {' · '.join(parts) or 'none ran'}{source}"


def findings_text(runs: list[RunRow], events: list[dict[str, Any]]) -> Text:
    findings: list[dict[str, Any]] = []
    overall = None
    for r in runs:
        result = (r.verdict or {}).get("result") if r.role == "reviewer" else None
        if isinstance(result, dict):
            overall = result.get("overall", overall)
            findings = list(result.get("findings") or [])
    if overall is None and events:
        data = events[-1].get("data") or {}
        overall = data.get("overall")
        found = data.get("findings")
        findings = list(found) if isinstance(found, list) else \
            [{"summary": s} for s in data.get("summaries") or [] if isinstance(data["summaries"], list)]
    if overall is None:
        return Text("no review yet", style="dim")
    out = fmt.styled(str(overall), "green bold" if overall == "PASS" else "bold red")
    for f in findings:
        if isinstance(f, dict):
            out.append(f"\n• [{f.get('severity', '?')}] ", style="yellow")
            out.append(f"{f.get('file_line', '')} ", style="dim")
            out.append(str(f.get("summary", "")))
    return out


def diff_stat(app: CockpitApp, task: TaskRow) -> str:
    """The branch's diff stat against the integration branch (core.worktrees), read-only."""
    from pilothouse.core.git import worktrees
    from pilothouse.core.records import project

    layout = app.layout
    assert layout is not None
    base = task.base or project.load_project(layout).integration_branch  # where its worktree started
    if task.worktree and Path(task.worktree).exists():
        stat = worktrees.diff_stat(task.worktree, base)
        return str(stat.get("text") or "no changes yet")
    if not task.branch:
        return "no branch yet"
    # the worktree is gone (merged, cleaned up): the branch still tells
    proc = subprocess.run([*worktrees.SAFE_GIT, "diff", "--shortstat", f"{base}...{task.branch}"], cwd=layout.root,
                          capture_output=True, text=True, timeout=10)
    return proc.stdout.strip() or proc.stderr.strip() or "no changes"


class RunDetail(Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="back"),
        Binding("f", "follow", "Follow", id="detail.follow"),
        Binding("left_square_bracket", "run(-1)", "Prev run", id="detail.prev"),
        Binding("right_square_bracket", "run(1)", "Next run", id="detail.next"),
        # the task's own problem is answered here, without going back to the dashboard
        *(Binding(key, f"reply('{reply}')", reply.capitalize(), id=f"detail.{reply}")
          for reply, key in fmt.REPLY_KEYS.items()),
    ]

    def __init__(self, job: str, task: str) -> None:
        super().__init__()
        self.job, self.task_id = job, task
        self.run_id: str | None = None
        self.follower: Follower | None = None
        self.totals: dict[str, int] = {}
        self._text = ""
        self._text_ts: str | None = None
        self._waiting = False  # the stream shows "waiting for" the run's log

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
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#runs").border_title = f"runs of {self.task_id}"
        self.query_one("#side").border_title = "gate · review · diff · logs"
        self.refresh_all()
        self.query_one("#stream").focus()
        self.set_interval(1, self._tick)

    def _tick(self) -> None:
        task = getattr(self, "_task_row", None)
        if task is not None and task.state in TASK_ACTIVE and self.is_current:
            self._head(task)  # a running task's elapsed time goes on between events

    def on_unmount(self) -> None:
        self._stop_follow()

    # --- data -----------------------------------------------------------------------------------

    def refresh_all(self, side: bool = True) -> None:
        """Re-read the task and its runs; `side` also re-reads gate, review and diff (costlier)."""
        q = self.cockpit.queries
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
            pick = task.run_id or (runs[-1].run_id if runs else None)
            if pick:
                table.select_key(pick)
                self.show_run(pick)
        self._head(task)
        if side:
            self._side(task, runs)

    def _head(self, task: TaskRow) -> None:
        self._task_row = task
        now = self.cockpit.clock()
        end = None if task.state in TASK_ACTIVE else task.updated_at
        q = self.cockpit.queries
        pauses = q.pauses().get((task.job, task.task), []) if q is not None else []
        # the store's count lags a running worker's own reports: the stream's running total is newer
        streamed = sum(self.totals.get(k, 0) for k in ("input", "output"))
        t = fmt.styled(f"{task.job} / ", "dim") + Text(task.task, style="bold") + Text("  ")
        t += fmt.state_text(task.state)
        t += Text(f"  {task.kind}  attempt {task.attempt}  review round {task.review_round}", style="dim")
        t += Text(f"\nworker {task.worker or '—'}  run {self.run_id or '—'}  "
                  f"tokens {fmt.tokens(max(task.tokens, streamed), task.usage)}"
                  f"  elapsed {fmt.worked(task.started_at, end, now, pauses) or '—'}")
        if task.activity:
            t += Text(f"  now: {task.activity}", style="cyan")
        if task.reason:
            t += Text(f"\n{task.reason}", style="yellow")
        self.query_one("#detail-head", Static).update(t)

    def _side(self, task: TaskRow, runs: list[RunRow]) -> None:
        layout = self.cockpit.layout
        assert layout is not None

        def mine(ev: dict[str, Any]) -> bool:
            return ev.get("job") == self.job and ev.get("task") == self.task_id and \
                str(ev.get("type")) in ("gate.finished", "review.finished")

        found = scan_back(layout.events, mine)
        gates = [e for e in found if e.get("type") == "gate.finished"]
        reviews = [e for e in found if e.get("type") == "review.finished"]
        self.query_one("#gate", Static).update(fmt.styled("gate\n", "bold underline") + gate_text(gates))
        self.query_one("#review", Static).update(
            fmt.styled("\nreview\n", "bold underline") + findings_text(runs, reviews))
        if task.branch or task.worktree:
            self.query_one("#diff", Static).update(fmt.styled("\ndiff stat\n", "bold underline") +
                                                    Text("…", style="dim"))
            self._load_diff(task)
        else:
            self._set_diff("no branch yet")
        logs = fmt.styled("\nlogs\n", "bold underline")
        run = next((r for r in runs if r.run_id == self.run_id), None)
        if run is not None:
            files = run_log_paths(run.provider, run.run_id, run.log)
            logs.append(fmt.tilde(files["events"].parent) + "/\n", style="dim")
            for path in files.values():
                logs.append(f"  {path.name}\n")
        # directory, then the file on its own line, as for the run's logs: a long path never
        # wraps in the middle of a name
        logs.append(fmt.tilde(layout.supervisor_log.parent) + "/\n", style="dim")
        logs.append(f"  {layout.supervisor_log.name}")
        self.query_one("#logs", Static).update(logs)

    def _load_diff(self, task: TaskRow) -> None:
        app = self.cockpit

        def work() -> None:
            try:
                text = diff_stat(app, task)
            except Exception as exc:  # noqa: BLE001
                text = f"diff stat unavailable: {exc}"
            app.call_from_thread(self._set_diff, text)

        self.run_worker(work, thread=True, group="diff", exclusive=True, exit_on_error=False)

    def _set_diff(self, text: str) -> None:
        if self.is_attached:
            self.query_one("#diff", Static).update(fmt.styled("\ndiff stat\n", "bold underline") + Text(text))

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
            task = getattr(self, "_task_row", None)
            if task is not None:
                self._head(task)

    def _flush(self, log: RichLog) -> None:
        # the result block is the contract's, for the supervisor: the side panel shows what it says
        text, results = _RESULT_RE.subn("", self._text)
        if text.strip():
            log.write(fmt.styled(fmt.clock(self._text_ts) + " ", "dim") + Text(" ".join(text.split())))
        if results:
            log.write(fmt.styled(fmt.clock(self._text_ts) + " result handed over", "dim"))
        self._text = ""

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        mine = [e for e in events if e.get("job") == self.job and e.get("task") == self.task_id]
        if any(str(e.get("type", "")).startswith("problem.") for e in mine):
            self.refresh_bindings()  # opened, answered or closed: the reply keys change
        if mine:
            # activity and usage come often: only a gate, a review, a merge or a new run redraws the side
            heavy = {"gate.finished", "review.finished", "merge.finished", "run.started", "run.finished"}
            self.refresh_all(side=any(e.get("type") in heavy for e in mine))
            started = [e["run"] for e in mine if e.get("type") == "run.started" and e.get("run")]
            if started:  # a new worker on this task (a resume, a reviewer): follow it
                self.query_one(RunsTable).select_key(started[-1])
                self.show_run(started[-1])

    # --- keys -----------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value:
            self.show_run(event.row_key.value)
            q = self.cockpit.queries
            task = q.task(self.job, self.task_id) if q else None
            if task is not None:
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
