"""The one dashboard: jobs, tasks of the selected job, providers and quota, problems, events.

It draws only what the store says. `load()` reads everything once (startup, repo switch);
`apply()` re-reads just the rows a batch of events names (core.queries.affected), so a busy
job costs a few primary-key lookups per frame and rows change in place.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.problems import ReplyRow
from pilothouse.core.queries.work import Changes, JobRow, TaskRow
from pilothouse.core.stops.problems import Problem
from pilothouse.tui.format import styled
from pilothouse.tui.widgets.events import EventStream
from pilothouse.tui.widgets.footer import SteadyFooter
from pilothouse.tui.widgets.panels import JobsTable, ProblemsTable, ProvidersTable, TasksTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static

if TYPE_CHECKING:
    from pilothouse.tui.app import CockpitApp

# numbered in screen order (also the tab order): left to right, top to bottom
PANELS = ("jobs-table", "providers-table", "tasks-table", "problems-table", "events")
TITLES = ("Jobs", "Providers & quota", "Tasks", "Problems", "Events")


class Dashboard(Screen[None]):
    # Screen's own repaints the whole screen when the focus moves: most of a panel jump's frame. The
    # two panels the focus leaves and enters are restyled, and so repainted, without it.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    BINDINGS = [
        *(Binding(str(n), f"panel({n - 1})", TITLES[n - 1], show=False, id=f"panel.{n}") for n in range(1, 6)),
        Binding("slash", "filter", "Filter", id="filter"),
        Binding("f", "follow", "Follow", show=False, id="events.follow"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="back"),
    ]

    def compose(self) -> ComposeResult:
        with Horizontal(id="status-bar"):
            yield Static(id="status")
            # a widget of its own: the status line is cut on a narrow terminal, the way to help is not
            yield Static(Text(f" │ {self.cockpit.key_for('app.help', '?')} help ", style="dim"), id="status-help")
        with Horizontal(id="top"):
            yield JobsTable(classes="panel")
            yield ProvidersTable(classes="panel")
        yield TasksTable(classes="panel")
        yield ProblemsTable(classes="panel")
        yield EventStream(id="events", classes="panel")
        yield Input(placeholder="filter this panel (enter keeps, esc clears)", id="filter")
        yield SteadyFooter()

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    @property
    def jobs(self) -> JobsTable:
        return self.query_one(JobsTable)

    @property
    def tasks(self) -> TasksTable:
        return self.query_one(TasksTable)

    @property
    def providers(self) -> ProvidersTable:
        return self.query_one(ProvidersTable)

    @property
    def problems(self) -> ProblemsTable:
        return self.query_one(ProblemsTable)

    @property
    def events(self) -> EventStream:
        return self.query_one(EventStream)

    def on_mount(self) -> None:
        for n, panel_id in enumerate(PANELS):
            self.query_one(f"#{panel_id}").border_title = f"{n + 1} {TITLES[n]}"
        self.events.border_subtitle = "following"
        self.query_one("#filter", Input).display = False
        self.jobs.focus()
        self.cockpit.dashboard_ready()

    # --- data -----------------------------------------------------------------------------------

    @property
    def selected_job(self) -> str | None:
        return self.tasks.job

    def load(self, events: list[dict[str, Any]]) -> None:
        q, now = self.cockpit.queries, self.cockpit.clock()
        if q is None:
            return
        self._read_pauses()
        jobs = q.jobs()
        self.jobs.show(jobs, now)
        job = self._default_job(jobs)
        if job is not None:
            self.jobs.select_key(job)
        self._show_tasks(job, now)
        self.providers.show(q.providers(), now)
        self._show_problems(q.problems())
        self.events.push(events)
        self.update_status()

    @staticmethod
    def _default_job(jobs: list[JobRow]) -> str | None:
        live = [j for j in jobs if not j.final]
        pick = live[-1] if live else jobs[-1] if jobs else None
        return pick.job if pick else None

    def _read_pauses(self) -> None:
        q = self.cockpit.queries
        self.jobs.pauses = self.tasks.pauses = q.pauses() if q is not None else {}
        self.jobs.busy = q.busy() if q is not None else {}

    def _show_tasks(self, job: str | None, now: datetime) -> None:
        q = self.cockpit.queries
        tasks = q.tasks(job) if (q is not None and job) else []
        self.tasks.show(job, tasks, now)
        self.tasks.border_title = f"3 Tasks · {job}" if job else "3 Tasks"
        self.share_height()

    def _show_problems(self, problems: list[Problem]) -> None:
        q = self.cockpit.queries
        # an answer the supervisor has not taken yet
        waiting = q.waiting_answers() if q is not None else {}
        pending: dict[str, ReplyRow] = {p.code: waiting[p.code] for p in problems if p.code in waiting}
        self._problem_rows = problems
        self._supervisor_alive = self.cockpit.supervisor_alive()
        self.problems.show(problems, pending, stopped=not self._supervisor_alive)
        waiting_n = len(problems) - len(pending)
        title = "4 Problems"
        if problems:
            title += f" · {waiting_n} open" if waiting_n else ""
            title += f" · {len(pending)} answered" if pending else ""
        self.problems.border_title = title
        self.bindings_may_change()
        self.share_height()

    def apply(self, changes: Changes, events: list[dict[str, Any]]) -> None:
        q, now = self.cockpit.queries, self.cockpit.clock()
        if q is None:
            return
        if changes.problems or any(e.get("type") in ("run.started", "run.finished") for e in events):
            self._read_pauses()  # before the rows: an answered problem's wait leaves their times
        for name in sorted(changes.jobs):
            job = q.job(name)
            if job is not None:
                self.jobs.put(job, now)
        if self.tasks.job is None and self.jobs.jobs:
            self._show_tasks(self._default_job(list(self.jobs.jobs.values())), now)
        elif self.tasks.job in changes.task_lists:
            self._show_tasks(self.tasks.job, now)
        else:
            for job_name, task_name in sorted(changes.tasks):
                if job_name != self.tasks.job:
                    continue
                task = q.task(job_name, task_name)
                if task is None:
                    continue
                if task_name in self.tasks.tasks:
                    self.tasks.put(task, now)
                else:
                    self._show_tasks(job_name, now)  # a new task: the tree order may change
                    break
        if changes.problems:
            self._show_problems(q.problems())
        if changes.providers:
            self.providers.show(q.providers(), now)
        self.events.push(events)
        if changes.supervisor or changes.problems:
            self.update_status()

    def tick(self) -> None:
        now = self.cockpit.clock()
        self.jobs.tick(now)
        self.tasks.tick(now)
        if self.providers.region.height > 0:  # countdowns tick only while on screen
            self.providers.tick(now)
        self.update_status()

    def update_status(self) -> None:
        rows = getattr(self, "_problem_rows", None)
        if rows and self.cockpit.supervisor_alive() != getattr(self, "_supervisor_alive", None):
            self._show_problems(rows)  # an answered row says whether the supervisor will take it
        line = self.cockpit.status_line(narrow=0 < self.size.width < 110)
        if line != getattr(self, "_status", None):  # Static.update lays the screen out again: only on change
            self._status = line
            self.query_one("#status", Static).update(line)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the cursor's key *now*: a rebuild's passing highlights are stale by the time they arrive
        job = self.jobs.current_key
        if event.data_table is self.jobs and job is not None and job != self.tasks.job:
            self._show_tasks(job, self.cockpit.clock())
        self.bindings_may_change()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is self.jobs:
            self.tasks.focus()
        elif event.data_table is self.tasks and event.row_key.value:
            self.cockpit.open_run_detail(self.selected_job, event.row_key.value)
        elif event.data_table is self.problems and event.row_key.value:
            self.cockpit.open_problem(event.row_key.value)

    # --- what the keys act on -------------------------------------------------------------------

    def bindings_may_change(self) -> None:
        """Refresh the footer once, after the current burst, and only if what the keys act on
        changed: a footer rebuild costs more than everything else on a frame."""
        if not getattr(self, "_bindings_pending", False):
            self._bindings_pending = True
            self.call_after_refresh(self._refresh_bindings_now)

    def _refresh_bindings_now(self) -> None:
        self._bindings_pending = False
        problem, task = self.current_problem, self.current_task
        key = (problem.code if problem else None, problem.replies if problem else None,
               problem is not None and problem.code in self.problems.pending,
               self.selected_job, task.state if task else None, task.run_id if task else None)
        if key != getattr(self, "_bindings_key", None):
            self._bindings_key = key
            self.app.refresh_bindings()

    @property
    def current_task(self) -> TaskRow | None:
        key = self.tasks.current_key
        return self.tasks.tasks.get(key) if key else None

    @property
    def current_problem(self) -> Problem | None:
        """The problem the reply keys answer: the focused panel's own selection, never another's.

        Tasks: the selected task's open problem. Jobs: the selected job's own (task-less) problem.
        Problems: its highlighted row. Elsewhere none, so `a` pressed while reading the event log
        cannot accept whatever the Problems panel happens to highlight."""
        if self.focused is self.problems:
            return self.problems.current
        if self.focused is self.tasks:
            task = self.current_task
            job, name = (task.job, task.task) if task is not None else (None, None)
        elif self.focused is self.jobs:
            job, name = self.jobs.current_key, None
        else:
            return None
        if job is None:
            return None
        for p in self.problems.problems.values():
            if p.task == name and p.job == job:
                return p
        return None

    # --- actions --------------------------------------------------------------------------------

    def action_panel(self, index: int) -> None:
        self.query_one(f"#{PANELS[index]}").focus()

    def on_descendant_focus(self) -> None:
        self.bindings_may_change()  # the Tasks panel's stopped task may own the reply keys
        self.share_height()

    def on_resize(self) -> None:
        self.share_height()

    # --- the height Tasks and Problems share ------------------------------------------------------

    def share_height(self) -> None:
        """Once the current layout is done: split the rows Tasks and Problems hold between them."""
        if not getattr(self, "_share_pending", False):
            self._share_pending = True
            self.call_after_refresh(self._share_now)

    def _share_now(self) -> None:
        from textual.css.query import NoMatches

        self._share_pending = False
        if not self.is_mounted:
            return
        try:  # a refresh that comes while the app closes finds the panels gone
            tasks, problems = self.tasks, self.problems
        except NoMatches:
            return
        total = tasks.outer_size.height + problems.outer_size.height
        if not total:
            return
        height = split_height(total, tasks.row_count, problems.row_count, 1 + tasks.styles.gutter.height,
                              1 + problems.styles.gutter.height,
                              "problems" if self.focused is problems else "tasks" if self.focused is tasks else None)
        if problems.styles.height is None or problems.styles.height.cells != height:
            problems.styles.height = height
            problems.styles.max_height = height  # the stylesheet's cap is for a panel sized by its rows

    def action_follow(self) -> None:
        self.events.follow = True

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        target = self.focused if self.focused is not None and self.focused.id in PANELS else self.events
        self._filter_target = target.id
        box.value = getattr(target, "filter_text", "")
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            target = self.query_one(f"#{getattr(self, '_filter_target', 'events')}")
            target.set_filter(event.value)  # type: ignore[attr-defined]
            base = target.border_title or ""
            base = str(base).split("  /", 1)[0]
            target.border_title = f"{base}  /{event.value}" if event.value else base

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = False
            self.query_one(f"#{getattr(self, '_filter_target', 'events')}").focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display or box.value:
            box.value = ""
            box.display = False
            self.query_one(f"#{getattr(self, '_filter_target', 'events')}").focus()
            if self.events.follow:  # the layout changed under the log: settle at the newest line again
                self.events.settle()


def split_height(total: int, task_rows: int, problem_rows: int, task_chrome: int, problem_chrome: int,
                 focused: object = None) -> int:
    """The Problems panel's height when it and Tasks share `total` lines by what they hold (`chrome`:
    each one's border and header): each its rows when they fit, else each in proportion to its rows,
    with two rows at least (fewer if it holds fewer), the focused one first."""
    need_t, need_p = task_chrome + max(task_rows, 1), problem_chrome + max(problem_rows, 1)
    if need_t + need_p <= total:
        return need_p
    min_t, min_p = task_chrome + min(task_rows, 2), problem_chrome + min(problem_rows, 2)
    if focused == "problems":
        share = need_p
    elif focused == "tasks":
        share = total - need_t
    else:
        share = round(total * need_p / (need_t + need_p))
    return max(min_p, min(share, total - min_t))


def status_text(repo: str, supervisor: str, sup_style: str, problems: int, narrow: bool = False) -> Text:
    # what needs the operator comes first: on a narrow terminal the line's end is cut off, so there
    # the badge goes (the terminal's title names the app) and the words are the short ones
    t = Text() if narrow else styled(" pilothouse ", "bold reverse")
    if problems:
        t += Text(" ") + Text(f"{problems} problem{'s' if problems != 1 else ''}"
                              + ("" if narrow else " waiting"), style="bold red") + Text(" │")
    t += Text(f" {repo} ", style="bold")
    t += Text("│ supervisor ") + Text(supervisor, style=sup_style)
    return t
