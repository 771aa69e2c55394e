"""The cockpit application: one repository's store and event log, drawn live.

Startup reads the store and the last 500 events (never the whole log); a follower thread then
hands over appended events in coalesced batches and the dashboard re-reads only the rows they
name. Operator actions go through core (problems, jobs, supervisor_ctl) in worker threads and
are drawn when their events come back, never optimistically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pilothouse.core.queries.problems import SupervisorRow
from pilothouse.core.queries.work import Queries, affected
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLogUnusable, EventTailer, parse_ts
from pilothouse.providers.errors import UserError
from pilothouse.tui import format as fmt
from pilothouse.tui.actions import ActionsMixin
from pilothouse.tui.bindings import FIX_BINDINGS, JOB_BINDINGS, REPLY_BINDINGS
from pilothouse.tui.collector import Collector
from pilothouse.tui.fix import FixMixin
from pilothouse.tui.inert_screen import InertLines
from pilothouse.tui.live import Follower
from pilothouse.tui.screens.dashboard import Dashboard, status_text
from pilothouse.tui.typeahead import KeyGate
from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.filter import LineFilter
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer

TAIL_EVENTS = 500
_INERT_LINES = InertLines()


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
        self.collector = Collector()
        self._keys = KeyGate(self)
        self.on_batch: Callable[[list[dict[str, Any]]], None] | None = None  # bench/test hook
        self.first_screen: Callable[[], Screen[Any]] | None = None  # opened over the dashboard at once (replay)
        from pilothouse.tui import config

        conf = config.load(self.available_themes, binding_scopes)  # the operator's theme and keys
        self.config_problems = conf.problems
        self.keymap = conf.keymap  # the help screen shows these keys
        self._keymap = self._normalize_keymap(conf.keymap)  # set_keymap would refresh bindings not yet there
        self._palette = False
        self._theme_timer: Timer | None = None
        self._saved_theme = conf.theme or "textual-dark"
        self.theme = self._saved_theme
        self.watch_theme(self.theme)


    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, then InertLines over every line drawn (tui/inert_screen.py)."""
        return [*super().get_line_filters(), _INERT_LINES]

    def scopes(self) -> list[tuple[str, tuple[type, ...]]]:
        return binding_scopes()

    def key_for(self, binding_id: str, default: str) -> str:
        """The key the operator presses for a binding now: their cockpit.yaml's, else `default`."""
        from pilothouse.tui.keymap import shown

        return shown(self, binding_id, default)[0]

    def get_default_screen(self) -> Screen[Any]:
        return Dashboard()

    @property
    def closing(self) -> bool:
        """On the way out: an exit was asked for, or the screens are going. Messages, timers and
        callbacks still come then; the panels they would draw on may be gone already."""
        return self._exit or not self.is_running or not self.screen_stack

    @property
    def dashboard(self) -> Dashboard:
        screen = self.screen_stack[0]
        assert isinstance(screen, Dashboard)
        return screen

    def on_mount(self) -> None:
        self.set_interval(1, self._tick)
        for line in self.config_problems:
            self.notify(line, title="cockpit.yaml", severity="warning", timeout=15)

    def watch_theme(self, theme: str) -> None:
        """The state colours follow the theme (tui/palette.py); a theme the operator picks is kept."""
        from pilothouse.tui import palette

        self._palette = palette.apply(self.console, self.get_css_variables(), self._palette)
        if self.is_running:
            # the palette's theme picker sets each theme it passes over: keep the one it stops on
            if self._theme_timer is not None:
                self._theme_timer.stop()
            self._theme_timer = self.set_timer(0.5, self._keep_theme)

    def _keep_theme(self) -> None:
        theme = self.theme
        if theme != self._saved_theme:
            self._saved_theme = theme
            self.run_worker(lambda: self._save_theme(theme), thread=True, group="theme")

    def _save_theme(self, theme: str) -> None:
        from pilothouse.tui import config

        try:
            config.save_theme(theme)
        except (UserError, OSError) as exc:
            self.call_from_thread(self.notify, f"theme not saved: {exc}", title="cockpit.yaml", severity="warning")

    def dashboard_ready(self) -> None:
        """Called by the dashboard once its panels exist."""
        if self.layout is not None:
            self.open_repo(self.layout)
            if self.first_screen is not None:
                self.push_screen(self.first_screen())
        elif self.repos:
            from pilothouse.tui.screens.picker import RepoPicker

            # the top line says so from the picker's first frame, not from the clock's next tick
            self.dashboard.update_status()
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
        try:
            events = tailer.tail(self.tail)
        except EventLogUnusable as exc:  # a directory or a FIFO where the log should be: said, not fatal
            events = []
            self.notify(str(exc), title="event log", severity="error", timeout=30)
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
        self.collector.release()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self.collector.input()  # the operator is here: no full collection now
        if self._keys.admit(event):  # a key typed ahead waits for the one before (tui/typeahead.py)
            await super().on_event(event)

    async def _forward_key(self, key: events.Key) -> None:
        """A held key, let in once the key before it has been applied."""
        await super().on_event(key)

    def on_events_arrived(self, message: EventsArrived) -> None:
        if self.follower is None or self.closing:
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
        if self.closing:
            return
        self._ticks += 1
        self.collector.idle()
        if self._ticks % 5 == 0:
            self.refresh_supervisor()  # a supervisor that died says nothing: look now and then
            self.refresh_setup()  # `pilothouse init` run in another terminal
        if self.screen is self.screen_stack[0]:
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
        if self.layout is not None and not self.closing:
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
        if layout is self.layout and not self.closing:
            self.refresh_setup()
            self.dashboard.update_status()
            self.settled()
            self.call_after_refresh(self.prepare_run_detail)  # enter's screen, built before it is asked for

    def settled(self) -> None:
        """What exists now lives as long as the app: the garbage collector leaves it alone (tui/collector.py)."""
        self.collector.settle()

    def supervisor_alive(self) -> bool:
        return self.supervisor_info is not None

    def status_line(self, narrow: bool = False) -> Any:
        """The dashboard's top line; `narrow` (80 columns): without the name badge, every part whole."""
        repo = self.layout.root.name if self.layout else "(no repository)"
        row = self.supervisor_row
        table = self.dashboard.problems
        problems = len(set(table.problems) - set(table.pending)) if self.queries else 0
        start = self.key_for("supervisor.toggle", "S")
        if self.layout is None:  # the repository picker is up: nothing here has a supervisor yet
            return status_text(repo, "none until you pick a repository", "dim", problems, narrow)
        if self.setup_error and not self.supervisor_alive():
            assert self.layout is not None
            if self.layout.project_yaml.exists():
                return status_text(repo, f"bad .ai/project.yaml: {self.key_for('job.new', 'n')} or {start} says why",
                               "bold red", problems, narrow)
            return status_text(repo, "not set up: run `pilothouse init`", "bold yellow", problems, narrow)
        damage = self.queries.damage if self.queries is not None else None
        if damage and not self.supervisor_alive():
            return status_text(repo, damage, "bold red", problems, narrow)
        if row is None:
            return status_text(repo, f"never started · {start} starts", "dim", problems, narrow)
        if not self.supervisor_alive():
            from pilothouse.core.supervisor.health import last_stop

            why = last_stop(self.layout) if self.layout is not None else None
            if why:
                return status_text(repo, f"stopped: {why}", "bold red", problems, narrow)
            return status_text(repo, f"stopped · {start} starts", "yellow", problems, narrow)
        beat = parse_ts(row.heartbeat_at)
        age = fmt.duration((self.clock() - beat).total_seconds()) if beat else "?"
        if narrow:
            return status_text(repo, f"running · beat {age} ago", "green", problems, narrow)
        return status_text(repo, f"running pid {row.pid} · beat {age} ago", "green", problems)

    # --- app-wide actions -----------------------------------------------------------------------

    def action_help(self) -> None:
        from pilothouse.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        # to the other side of the current theme: from nord (dark) to light, not to textual-dark first
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def _on_dashboard(self, action: Callable[[], None]) -> None:
        """A palette command about the Tasks panel's task: as its key would, from the Tasks panel."""
        self.dashboard.tasks.focus()
        self.call_later(action)

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
            yield SystemCommand("Settings", "Every setting of .ai/project.yaml and the email notices",
                                self.action_settings)
            yield SystemCommand("Usage", "Tokens and money per provider, job and task; each job's budget",
                                self.action_usage)
            if self.dashboard.selected_job is not None:
                yield SystemCommand("Timeline", f"Job {self.dashboard.selected_job}'s story: who held which task "
                                    "in which state, when; problems, gates, merges", self.action_timeline)
            # the ones that act on the dashboard's selection, offered only when there is one (as their
            # keys are); `screen` is the one the palette was opened on (app.screen is the palette now)
            if screen is self.screen_stack[0]:
                dash = self.dashboard
                job = dash.jobs.jobs.get(dash.selected_job or "")
                if job is not None and job.state == "accepted":
                    yield SystemCommand("Ship", f"Put job {job.job}'s accepted work onto the base branch "
                                        "(asks first)", self.action_ship)
                task = dash.current_task
                if task is not None:
                    yield SystemCommand("Diff", f"{task.task}'s change against its base",
                                        lambda: self._on_dashboard(self.action_diff))
                    yield SystemCommand("Gate log", f"Every run of {task.task}'s gate, with search",
                                        lambda: self._on_dashboard(self.action_gate_log))


def binding_scopes() -> list[tuple[str, tuple[type, ...]]]:
    """The bindings active together (tui/keymap.py): the focused widget's, its screen's and, on the
    dashboard, the app's. A screen's own keys shadow the app's on purpose (q goes back, not quits)."""
    from pilothouse.tui.screens.detail import RunDetail
    from pilothouse.tui.screens.diff import DiffScreen
    from pilothouse.tui.screens.email import PasswordModal
    from pilothouse.tui.screens.gatelog import GateLog
    from pilothouse.tui.screens.help import HelpScreen
    from pilothouse.tui.screens.jobform import JobForm
    from pilothouse.tui.screens.modals import ConfirmModal, PickModal, ValueModal, WordsModal
    from pilothouse.tui.screens.picker import RepoPicker
    from pilothouse.tui.screens.problem import ProblemDialog
    from pilothouse.tui.screens.settings import SettingsScreen
    from pilothouse.tui.screens.timeline import TimelineScreen
    from pilothouse.tui.screens.usage import UsageScreen
    from pilothouse.tui.widgets.events import EventStream
    from pilothouse.tui.widgets.table import KeyedTable

    return [("dashboard", (CockpitApp, Dashboard, KeyedTable)), ("dashboard", (CockpitApp, Dashboard, EventStream)),
            ("run detail", (RunDetail, KeyedTable)),
            ("problem dialog", (ProblemDialog,)), ("help", (HelpScreen,)), ("settings", (SettingsScreen, KeyedTable)),
            ("usage", (UsageScreen, KeyedTable)), ("timeline", (TimelineScreen,)), ("diff", (DiffScreen,)), ("gate log", (GateLog,)),
            ("new job", (JobForm,)), ("confirm", (ConfirmModal,)), ("words", (WordsModal,)), ("value", (ValueModal,)),
            ("pick", (PickModal,)),
            ("repository picker", (RepoPicker,)), ("password", (PasswordModal,))]


def run_cockpit(layout: RepoLayout | None, repos: Iterable[RepoLayout] = ()) -> int:
    CockpitApp(layout, repos).run()
    return 0
