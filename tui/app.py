"""The cockpit application: one repository's store and event log, drawn live.

Startup reads the store and the last 500 events (never the whole log); a follower thread then
hands over appended events in coalesced batches and the dashboard re-reads only the rows they
name. Operator actions go through core (problems, jobs, supervisor_ctl) in worker threads and
are drawn when their events come back, never optimistically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from pilothouse.core.queries.problems import SupervisorRow
from pilothouse.core.queries.work import Queries, affected
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventTailer, parse_ts
from pilothouse.providers.errors import UserError
from pilothouse.tui import format as fmt
from pilothouse.tui.actions import ActionsMixin
from pilothouse.tui.bindings import FIX_BINDINGS, JOB_BINDINGS, REPLY_BINDINGS
from pilothouse.tui.fix import FixMixin
from pilothouse.tui.live import Follower
from pilothouse.tui.screens.dashboard import Dashboard, status_text
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen

TAIL_EVENTS = 500


class EventsArrived(Message):
    """New lines wait in the follower (the message carries none: it takes them all when handled)."""


class CockpitApp(ActionsMixin, FixMixin, App[None]):
    CSS_PATH = "cockpit.tcss"
    TITLE = "pilothouse"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False, id="app.theme"),
        *REPLY_BINDINGS,
        *JOB_BINDINGS,
        *FIX_BINDINGS,
    ]

    def __init__(self, layout: RepoLayout | None, repos: Iterable[RepoLayout] = (),
                 clock: Callable[[], datetime] | None = None, live: bool = True,
                 tail: int = TAIL_EVENTS) -> None:
        super().__init__()
        self.layout = layout
        self.repos = list(repos)
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.live = live
        self.tail = tail
        self.queries: Queries | None = None
        self.follower: Follower | None = None
        self.supervisor_row: SupervisorRow | None = None
        self.supervisor_info: dict[str, Any] | None = None  # core.supervisor_ctl.status(): alive
        self.setup_error: str | None = None  # why .ai/project.yaml does not load (None: set up)
        self._ticks = 0
        self.on_batch: Callable[[list[dict[str, Any]]], None] | None = None  # bench/test hook
        self.theme = "textual-dark"

    def get_default_screen(self) -> Screen[Any]:
        return Dashboard()

    @property
    def dashboard(self) -> Dashboard:
        screen = self.screen_stack[0]
        assert isinstance(screen, Dashboard)
        return screen

    def on_mount(self) -> None:
        self.set_interval(1, self._tick)

    def dashboard_ready(self) -> None:
        """Called by the dashboard once its panels exist."""
        if self.layout is not None:
            self.open_repo(self.layout)
        elif self.repos:
            from pilothouse.tui.screens.picker import RepoPicker

            self.push_screen(RepoPicker(self.repos), self._picked)

    def _picked(self, layout: RepoLayout | None) -> None:
        if layout is None:
            self.exit()
        else:
            self.open_repo(layout)

    def open_repo(self, layout: RepoLayout) -> None:
        self._close_repo()
        self.layout = layout
        self.queries = Queries(layout)
        tailer = EventTailer(layout.events)
        events = tailer.tail(self.tail)
        # parsing .ai/project.yaml imports the record models (pydantic): after the first frame is painted
        self.call_after_refresh(self._setup_after_paint, layout)
        self.refresh_supervisor()
        self.dashboard.load(events)
        self._say_skips(tailer)
        if self.live:
            self.follower = Follower(layout.events, tailer, lambda: self.post_message(EventsArrived()))
            self.follower.start()

    def _close_repo(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        if self.queries is not None:
            self.queries.close()
            self.queries = None

    def on_unmount(self) -> None:
        self._close_repo()

    def on_events_arrived(self, message: EventsArrived) -> None:
        if self.follower is None:
            return
        events = self.follower.take()
        self._say_skips(self.follower.tailer)
        if events:
            self.apply_events(events)

    def _say_skips(self, tailer: EventTailer) -> None:
        notice = tailer.skip_notice()
        if notice:
            self.notify(notice, title="event log", severity="warning", timeout=10)

    def apply_events(self, events: list[dict[str, Any]]) -> None:
        changes = affected(events)
        if changes.supervisor:
            self.refresh_supervisor()
        self.dashboard.apply(changes, events)
        for screen in self.screen_stack[1:]:
            handler = getattr(screen, "on_repo_events", None)
            if handler is not None:
                handler(events)
        hook = self.on_batch
        if hook is not None:
            self.call_after_refresh(hook, events)

    def _tick(self) -> None:
        self._ticks += 1
        if self._ticks % 5 == 0:
            self.refresh_supervisor()  # a supervisor that died says nothing: look now and then
            self.refresh_setup()  # `pilothouse init` run in another terminal
        if self.screen is self.screen_stack[0] and not self._exit_renderables and self.is_running:
            try:
                self.dashboard.tick()
            except NoMatches:  # shutting down: the panels are already gone
                pass

    # --- supervisor -----------------------------------------------------------------------------

    def refresh_supervisor(self) -> None:
        if self.queries is None or self.layout is None:
            return
        self.supervisor_row = self.queries.supervisor()
        if self.supervisor_row is None or self.supervisor_row.stopped_at:
            self.supervisor_info = None
            return
        from pilothouse.core.supervisor import control as supervisor_ctl

        try:
            self.supervisor_info = supervisor_ctl.status(self.layout)
        except Exception:  # noqa: BLE001 - a store being created: ask again on the next tick
            self.supervisor_info = None

    def refresh_supervisor_now(self) -> None:
        """After a start from here: draw the new state without waiting for the next look."""
        self.refresh_supervisor()
        if self.layout is not None and self.is_running:
            self.dashboard.update_status()

    def refresh_setup(self) -> None:
        """Whether the repository is set up (`pilothouse init`): a small file, read as core reads it."""
        if self.layout is None:
            self.setup_error = None
            return
        try:
            stamp: Any = self.layout.project_yaml.stat().st_mtime_ns
        except OSError:
            stamp = None
        if (self.layout, stamp) == getattr(self, "_setup_stamp", None):
            return  # unchanged since the last look: parse it again only when it changes
        self._setup_stamp = (self.layout, stamp)
        try:
            from pilothouse.core.records.project import load_project
        except ImportError:
            return
        try:
            load_project(self.layout)
        except UserError as exc:
            self.setup_error = str(exc)
        else:
            self.setup_error = None

    def _setup_after_paint(self, layout: RepoLayout) -> None:
        if layout is self.layout and self.is_running:
            self.refresh_setup()
            self.dashboard.update_status()

    def supervisor_alive(self) -> bool:
        return self.supervisor_info is not None

    def status_line(self) -> Any:
        repo = self.layout.root.name if self.layout else "(no repository)"
        row = self.supervisor_row
        table = self.dashboard.problems
        problems = len(set(table.problems) - set(table.pending)) if self.queries else 0
        if self.setup_error and not self.supervisor_alive():
            assert self.layout is not None
            if self.layout.project_yaml.exists():
                return status_text(repo, "bad .ai/project.yaml: n or S says why", "bold red", problems)
            return status_text(repo, "not set up: run `pilothouse init`", "bold yellow", problems)
        if row is None:
            return status_text(repo, "never started · S starts", "dim", problems)
        if not self.supervisor_alive():
            return status_text(repo, "stopped · S starts", "yellow", problems)
        beat = parse_ts(row.heartbeat_at)
        age = fmt.duration((self.clock() - beat).total_seconds()) if beat else "?"
        return status_text(repo, f"running pid {row.pid} · beat {age} ago", "green", problems)

    # --- app-wide actions -----------------------------------------------------------------------

    def action_help(self) -> None:
        from pilothouse.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Toggle light/dark", "Switch between the light and dark theme",
                            self.action_toggle_theme)
        yield SystemCommand("Help: keys", "Every key of the cockpit", self.action_help)
        if self.layout is not None:
            yield SystemCommand("New job", "Write a request and create a job", self.action_new_job)
            yield SystemCommand("Start/stop supervisor", "Start the supervisor, or stop the running one",
                                self.action_supervisor)
            yield SystemCommand("Follow events", "Jump to the newest event and follow",
                                self.dashboard.action_follow)


def run_cockpit(layout: RepoLayout | None, repos: Iterable[RepoLayout] = ()) -> int:
    CockpitApp(layout, repos).run()
    return 0
