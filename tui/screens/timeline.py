"""A job's timeline (`T` on the dashboard): who held which task in which state, when, per worker slot
or per task, with the problems, answers, gate failures, merges and quota waits on the lanes.

The log is read once, in a thread (a big job's screen appears at once and fills in), into a kept
`TimelineFold` (core/queries/timeline.py); live events are folded into it one by one and the chart
is drawn again once per burst. enter on a bar opens its run's detail, as enter on a task does; on
the job's own lane, the planner's or a combined review's run (the full gate's bar, no worker's, says so).
`R` turns it into a replay of the job (timeline_replay.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pilothouse.core.queries.timeline_model import STATE_WORDS, TYPES, Bar, Timeline
from pilothouse.providers.registry import labelled
from pilothouse.tui import format as fmt
from pilothouse.tui.screens.timeline_replay import ReplayMixin
from pilothouse.tui.widgets.footer import SteadyFooter
from pilothouse.tui.widgets.timeline import MARK_WORDS, MARKS, ZOOMS, TimelineChart, bar_end, legend, span_of
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static

if TYPE_CHECKING:
    from pilothouse.core.queries.timeline import TimelineFold
    from pilothouse.tui.app import CockpitApp

FINAL = {"accepted", "failed", "cancelled", "shipped"}  # a job in these has stopped moving: its end is its last event


def seconds_text(s: float) -> str:
    return f"{s:.1f}s" if s < 10 else fmt.duration(s)


def money_text(cost: float | None) -> str:
    if cost is None:
        return "cost ?"
    return f"${cost:.4f}" if 0 < cost < 0.01 else f"${cost:,.2f}"


def describe(bar: Bar | None, tl: Timeline, now: Any = None) -> Text:
    """The line under the chart: the bar under the cursor, in words (worker text as plain Text)."""
    from pilothouse.providers.usage import cost_label, tokens_text

    if bar is None:
        return Text("no bar here", style="dim")
    span = span_of(tl, now)
    out = Text()
    out.append(bar.task or "(job)", style="bold")
    length = (bar_end(bar, span) - bar.start.timestamp()) if span is not None else 0.0
    out.append(f" · {STATE_WORDS[bar.state]} {seconds_text(length)}" + (" so far" if bar.end is None else ""))
    if bar.usage is not None:  # what a narrow terminal cuts last: the figures, then who, then which run
        out.append(f" · {tokens_text(bar.tokens, bar.usage)} · {money_text(bar.cost_usd)} "
                   f"({cost_label(bar.usage, [bar.provider])})")
    if bar.role or bar.provider:
        out.append(f" · {bar.role or '?'} on {labelled(bar.provider) if bar.provider else '?'}")  # sim says so
    if bar.run:
        out.append(f" · run {bar.run}")
    if bar.reason:
        out.append(" · ")
        out.append(str(bar.reason), style="dim")
    if span is None:
        return out
    # the second line: what happened to the task while it was in this state (a problem, a failed gate, a merge)
    end = bar_end(bar, span) + 1e-3
    marks = [m for m in tl.marks if m.task == bar.task and bar.start.timestamp() <= m.at.timestamp() <= end]
    for n, m in enumerate(marks):
        glyph, colour = MARKS[m.kind]
        out.append("\n" if n == 0 else "  ")
        out.append(glyph, style=colour)
        out.append(f" {MARK_WORDS[m.kind]} ")
        out.append(str(m.text))
    return out


# the keys of replay mode only: offered (and shown in the footer) while it is on
_REPLAY_ACTIONS = {"play", "speed", "jump", "edge", "scrub"}


class TimelineScreen(ReplayMixin, Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        # q leaves to where the screen came from, and the footer says where: the shell for the screen
        # `pilothouse replay` opened, the timeline for a replay begun with R, else the dashboard (as esc)
        Binding("q", "leave('back')", "Back", show=False, id="timeline.leave"),
        Binding("q", "leave('quit')", "Quit", id="timeline.leave"),
        Binding("q", "leave('replay')", "End replay", id="timeline.leave"),
        # the replay's keys before the timeline's: the footer shows them first
        Binding("space", "play", "Play/pause", id="replay.play"),
        Binding("left_square_bracket", "speed(-1)", "Slower", id="replay.slower"),
        Binding("right_square_bracket", "speed(1)", "Faster", id="replay.faster"),
        Binding("n", "jump(1)", "Next mark", id="replay.next"),
        Binding("N", "jump(-1)", "Prev mark", show=False, id="replay.prev"),
        Binding("home", "edge(0)", "Start", show=False, id="replay.start"),
        Binding("end", "edge(1)", "End", show=False, id="replay.end"),
        Binding("shift+left", "scrub(-10)", "Back 10", show=False, id="replay.back"),
        Binding("shift+right", "scrub(10)", "On 10", show=False, id="replay.on"),
        Binding("escape", "app.pop_screen", "Back", id="timeline.back"),
        Binding("enter", "open_run", "Run detail", id="timeline.open"),
        Binding("left,h", "move(-1)", "Prev bar", show=False, id="timeline.prev"),
        Binding("right,l", "move(1)", "Next bar", show=False, id="timeline.next"),
        Binding("up,k", "lane(-1)", "Lane up", show=False, id="timeline.up"),
        Binding("down,j", "lane(1)", "Lane down", show=False, id="timeline.down"),
        Binding("b", "toggle_lanes", "By task/slot", id="timeline.lanes"),
        Binding("plus,equals_sign", "zoom(1)", "Zoom", id="timeline.zoom_in"),
        Binding("minus", "zoom(-1)", "Zoom out", show=False, id="timeline.zoom_out"),
        Binding("R", "replay", "Replay", id="timeline.replay"),
    ]
    # what the footer leaves out, first to last, when the keys on offer do not fit its width (a replay's
    # at 80 columns, 120 too): their keys still work, and the help lists them
    FOOTER_SPARE = ("timeline.replay", "timeline.open", "timeline.lanes", "timeline.zoom_in", "timeline.back")

    def __init__(self, job: str, by: Literal["slot", "task"] = "slot", replay: bool = False,
                 at: datetime | None = None, speed: float = 10.0, from_command_line: bool = False) -> None:
        super().__init__()
        self.job = job
        self.from_command_line = from_command_line  # `pilothouse replay` opened it: q quits the cockpit
        self.replaying = replay
        self._replay_from = at
        self.init_replay(speed)
        self.by: Literal["slot", "task"] = by
        self.fold: TimelineFold | None = None
        self.failed: str | None = None
        self.timeline: Timeline | None = None
        self._early: list[dict[str, Any]] = []  # events that came while the log was being read
        self._redraw_pending = False
        self.redraws = 0  # how many times the chart was drawn from the fold (tests: one per burst)
        self.note: str | None = None  # said under the cursor's line until it moves (`say`)

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    @property
    def chart(self) -> TimelineChart:
        return self.query_one(TimelineChart)

    @property
    def loaded(self) -> bool:
        if self.replaying:
            return self.moment is not None
        return self.fold is not None

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-head")
        yield TimelineChart(id="timeline-chart")
        yield Static(id="timeline-info")
        with Horizontal(id="replay-panel"):
            yield Static(id="replay-tasks")
            yield Static(id="replay-events")
        yield Static(id="timeline-legend")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.query_one("#timeline-legend", Static).update(legend())
        self.query_one("#replay-panel").display = self.replaying
        self.refresh_head()
        if self.replaying:
            self.read_player(self._replay_from)
        else:
            self._read()
        self.set_interval(1, self._tick)

    def _read(self) -> None:
        """The job's events through the index, in a thread: the screen is up before the fold is done."""
        layout = self.cockpit.layout
        if layout is None:
            return
        events, job, by = layout.events, self.job, self.by

        def fold() -> Any:
            from pilothouse.core.queries.timeline import fold_of

            kept = fold_of(events, job)
            return kept, by, kept.snapshot(by)  # a big job's snapshot is a fifth of the read: off the app's thread

        self.read_in_thread(fold, self._loaded)

    def read_in_thread(self, read: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """`read()` (the log, folded) in a thread, `then(result)` back in the app's: the screen is up
        before the fold is done."""
        def work() -> None:
            try:
                result = read()
            except Exception as exc:  # noqa: BLE001 - a damaged log or index: say so on the screen
                self.app.call_from_thread(self._read_failed, f"{type(exc).__name__}: {exc}")
            else:
                self.app.call_from_thread(then, result)

        self.run_worker(work, thread=True, group="timeline-read", exit_on_error=False)

    def _read_failed(self, why: str) -> None:
        self.failed = why
        self.refresh_head()

    def _loaded(self, read: tuple[TimelineFold, str, Timeline]) -> None:
        if not self.is_attached:
            return
        fold, by, tl = read
        seen = fold.seq
        fold.extend(e for e in self._early if int(e.get("seq") or 0) > fold.seq)
        self._early = []
        self.fold = fold
        if self.replaying:
            return
        if fold.seq == seen and by == self.by:  # nothing came in while it was read: the thread's snapshot holds
            self.redraws += 1
            self._show(tl)
        else:
            self.redraw()

    # --- live -----------------------------------------------------------------------------------

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        mine = [e for e in events if e.get("job") == self.job and e.get("type") in TYPES]
        if not mine:
            return
        if self.fold is None:
            self._early.extend(mine)
        else:
            seen = self.fold.seq
            self.fold.extend(e for e in mine if int(e.get("seq") or 0) > seen)
        if self.fold is not None or self.replaying:
            self.redraw_soon()

    def redraw_soon(self) -> None:
        """One redraw after the current burst of events, however many it held."""
        if not self._redraw_pending:
            self._redraw_pending = True
            self.call_after_refresh(self._redraw_now)

    def _redraw_now(self) -> None:
        self._redraw_pending = False
        if not self.is_attached:
            return
        if self.replaying:
            self.refresh_replay_events()  # the player reads on from its offset: the same kind of fold
        else:
            self.redraw()

    def _tick(self) -> None:
        tl = self.timeline
        if tl is not None and tl.state not in FINAL and self.is_current and not self.replaying:
            self._show(tl)  # a running job's right end is now: it moves on between events

    def now(self, tl: Timeline) -> Any:
        return None if tl.state in FINAL else self.cockpit.clock()

    def redraw(self) -> None:
        if self.replaying:
            self.draw_moment()
            return
        if self.fold is None:
            return
        self.redraws += 1
        self._show(self.fold.snapshot(self.by))

    def _show(self, tl: Timeline) -> None:
        self.timeline = tl
        self.chart.show(tl, self.now(tl))
        self.refresh_head()
        self.refresh_info()

    # --- the lines around the chart -----------------------------------------------------------------

    def refresh_head(self) -> None:
        if self.replaying and not self.failed:
            self.query_one("#timeline-head", Static).update(self.replay_head())
            return
        out = Text()
        out.append("timeline", style="bold")
        out.append(f" · {self.job}")
        tl = self.timeline
        if self.failed:
            out.append(f" · the log could not be read: {self.failed}", style="bold red")
        elif tl is None:
            out.append(" · reading the log…", style="dim")
        else:
            span = span_of(tl, self.now(tl))
            out.append(" · ")
            out.append_text(fmt.state_text(tl.state))
            if span is not None:
                out.append(f" · {seconds_text(span.seconds)}")
            out.append(f" · {len(tl.tasks)} tasks · {fmt.tokens(tl.tokens, tl.usage)} tokens")
            out.append(f" · by {self.by}")
            zoom = ZOOMS[self.chart.zoom]
            if zoom > 1:
                out.append(f" · zoom {zoom}×")
        self.query_one("#timeline-head", Static).update(out)

    def refresh_info(self) -> None:
        tl = self.timeline
        if tl is not None:
            now = None if self.replaying else self.now(tl)
            line = describe(self.chart.current, tl, now)
            if self.note:  # in the second line's place (the marks'): the info pane is two lines high
                line = line.split("\n")[0]
                line.append("\n" + self.note, style="yellow")
            self.query_one("#timeline-info", Static).update(line)

    # --- keys -----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in _REPLAY_ACTIONS:
            return self.replaying
        if action == "leave":  # the one of q's three that applies (the footer shows its word)
            return parameters == (self.leaves_to(),)
        return True

    def leaves_to(self) -> str:
        """Where q goes: `quit` the cockpit, end the `replay` begun with R, or `back` to the dashboard."""
        if self.from_command_line:
            return "quit"
        return "replay" if self.replaying else "back"

    def action_leave(self, to: str) -> None:
        if to == "quit":
            self.app.exit()
        elif to == "replay":
            self.action_replay()
        else:
            self.app.pop_screen()

    def action_move(self, step: int) -> None:
        self.note = None
        if self.replaying:
            self.scrub(step)  # along the time: the chart follows the moment
            return
        self.chart.move(step)
        self.refresh_info()

    def action_lane(self, step: int) -> None:
        self.note = None
        self.chart.move_lane(step)
        if self.replaying and self.moment is not None:
            self.chart.snap(self.moment)
        self.refresh_info()

    def action_zoom(self, step: int) -> None:
        self.chart.set_zoom(step)
        if self.replaying and self.moment is not None:
            self.chart.snap(self.moment)
        self.refresh_head()

    def action_toggle_lanes(self) -> None:
        self.by = "task" if self.by == "slot" else "slot"
        self.redraw()

    def action_replay(self) -> None:
        """Into replay mode at the cursor's bar, or back to the job as it is now."""
        self.replaying = not self.replaying
        self.query_one("#replay-panel").display = self.replaying
        chart = self.chart
        if self.replaying:
            bar = chart.current
            at = bar.start if bar is not None else None
            if self.player is None:
                self.read_player(at)
            elif at is not None:
                self.seek(at)
        else:
            self.pause()
            chart.full, chart.moment = None, None
            if self.fold is None:
                self._read()
            else:
                self.redraw()
        self.refresh_head()
        self.refresh_bindings()

    def action_play(self) -> None:
        if self.playing:
            self.pause()
        else:
            self.play()

    def action_speed(self, step: int) -> None:
        self.change_speed(step)

    def action_jump(self, step: int) -> None:
        self.jump(step)

    def action_edge(self, end: int) -> None:
        player = self.player
        if player is not None and player.start is not None and player.end is not None:
            self.seek(player.end if end else player.start)

    def action_scrub(self, columns: int) -> None:
        self.scrub(columns)

    def action_open_run(self) -> None:
        bar = self.chart.current
        if bar is None:
            self.say("no bar under the cursor: move onto one (arrows or h j k l), then enter")
            return
        if bar.task is None and bar.run is None:
            # the job's full gate is the one bar of the job's own lane no worker held
            self.say(f"no run to open: {STATE_WORDS[bar.state]} here was no worker's; `pilothouse report "
                     f"{self.job}` lists the job's gate runs")
            return
        self.cockpit.open_run_detail(self.job, bar.task, run=bar.run)

    def say(self, words: str) -> None:
        """A line under the cursor's, until the cursor moves: why a key did nothing."""
        self.note = words
        self.refresh_info()
