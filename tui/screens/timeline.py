"""A job's timeline (`T` on the dashboard): who held which task in which state, when, per worker slot
or per task, with the problems, answers, gate failures, merges and quota waits on the lanes.

The log is read once, in a thread (a big job's screen appears at once and fills in), into a kept
`TimelineFold` (core/queries/timeline.py); live events are folded into it one by one and the chart
is drawn again once per burst. enter on a bar opens its run's detail, as enter on a task does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pilothouse.core.queries.timeline_model import STATE_WORDS, TYPES, Bar, Timeline
from pilothouse.tui import format as fmt
from pilothouse.tui.widgets.footer import SteadyFooter
from pilothouse.tui.widgets.timeline import MARK_WORDS, MARKS, ZOOMS, TimelineChart, bar_end, legend, span_of
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
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
    from pilothouse.providers.usage import tokens_text

    if bar is None:
        return Text("no bar here", style="dim")
    span = span_of(tl, now)
    out = Text(bar.task or "(job)", style="bold")
    length = (bar_end(bar, span) - bar.start.timestamp()) if span is not None else 0.0
    out.append(f" · {STATE_WORDS[bar.state]} {seconds_text(length)}" + (" so far" if bar.end is None else ""))
    if bar.usage is not None:  # what a narrow terminal cuts last: the figures, then who, then which run
        out.append(f" · {tokens_text(bar.tokens, bar.usage)} · {money_text(bar.cost_usd)} ({bar.usage})")
    if bar.role or bar.provider:
        out.append(f" · {bar.role or '?'} on {bar.provider or '?'}")
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


class TimelineScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="timeline.back"),
        Binding("enter", "open_run", "Run detail", id="timeline.open"),
        Binding("left,h", "move(-1)", "Prev bar", show=False, id="timeline.prev"),
        Binding("right,l", "move(1)", "Next bar", show=False, id="timeline.next"),
        Binding("up,k", "lane(-1)", "Lane up", show=False, id="timeline.up"),
        Binding("down,j", "lane(1)", "Lane down", show=False, id="timeline.down"),
        Binding("b", "toggle_lanes", "By task/slot", id="timeline.lanes"),
        Binding("plus,equals_sign", "zoom(1)", "Zoom in", id="timeline.zoom_in"),
        Binding("minus", "zoom(-1)", "Zoom out", id="timeline.zoom_out"),
    ]

    def __init__(self, job: str, by: Literal["slot", "task"] = "slot") -> None:
        super().__init__()
        self.job = job
        self.by: Literal["slot", "task"] = by
        self.fold: TimelineFold | None = None
        self.failed: str | None = None
        self.timeline: Timeline | None = None
        self._early: list[dict[str, Any]] = []  # events that came while the log was being read
        self._redraw_pending = False
        self.redraws = 0  # how many times the chart was drawn from the fold (tests: one per burst)

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    @property
    def chart(self) -> TimelineChart:
        return self.query_one(TimelineChart)

    @property
    def loaded(self) -> bool:
        return self.fold is not None

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-head")
        yield TimelineChart(id="timeline-chart")
        yield Static(id="timeline-info")
        yield Static(id="timeline-legend")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.query_one("#timeline-legend", Static).update(legend())
        self._head()
        self._read()
        self.set_interval(1, self._tick)

    def _read(self) -> None:
        """The job's events through the index, in a thread: the screen is up before the fold is done."""
        layout = self.cockpit.layout
        if layout is None:
            return
        events, job = layout.events, self.job

        def work() -> None:
            from pilothouse.core.queries.timeline import fold_of

            try:
                fold = fold_of(events, job)
            except Exception as exc:  # noqa: BLE001 - a damaged log or index: say so on the screen
                self.app.call_from_thread(self._read_failed, f"{type(exc).__name__}: {exc}")
            else:
                self.app.call_from_thread(self._loaded, fold)

        self.run_worker(work, thread=True, group="timeline-read", exit_on_error=False)

    def _read_failed(self, why: str) -> None:
        self.failed = why
        self._head()

    def _loaded(self, fold: TimelineFold) -> None:
        if not self.is_attached:
            return
        fold.extend(e for e in self._early if int(e.get("seq") or 0) > fold.seq)
        self._early = []
        self.fold = fold
        self.redraw()

    # --- live -----------------------------------------------------------------------------------

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        mine = [e for e in events if e.get("job") == self.job and e.get("type") in TYPES]
        if not mine:
            return
        if self.fold is None:
            self._early.extend(mine)
            return
        seen = self.fold.seq
        self.fold.extend(e for e in mine if int(e.get("seq") or 0) > seen)
        self.redraw_soon()

    def redraw_soon(self) -> None:
        """One redraw after the current burst of events, however many it held."""
        if not self._redraw_pending:
            self._redraw_pending = True
            self.call_after_refresh(self._redraw_now)

    def _redraw_now(self) -> None:
        self._redraw_pending = False
        if self.is_attached:
            self.redraw()

    def _tick(self) -> None:
        tl = self.timeline
        if tl is not None and tl.state not in FINAL and self.is_current:
            self._show(tl)  # a running job's right end is now: it moves on between events

    def now(self, tl: Timeline) -> Any:
        return None if tl.state in FINAL else self.cockpit.clock()

    def redraw(self) -> None:
        if self.fold is None:
            return
        self.redraws += 1
        self._show(self.fold.snapshot(self.by))

    def _show(self, tl: Timeline) -> None:
        self.timeline = tl
        self.chart.show(tl, self.now(tl))
        self._head()
        self._info()

    # --- the lines around the chart -----------------------------------------------------------------

    def _head(self) -> None:
        out = Text("timeline", style="bold") + Text(f" · {self.job}")
        tl = self.timeline
        if self.failed:
            out.append(f" · the log could not be read: {self.failed}", style="bold red")
        elif tl is None:
            out.append(" · reading the log…", style="dim")
        else:
            span = span_of(tl, self.now(tl))
            out.append(" · ")
            out += fmt.state_text(tl.state)
            if span is not None:
                out.append(f" · {seconds_text(span.seconds)}")
            out.append(f" · {len(tl.tasks)} tasks · {fmt.tokens(tl.tokens, tl.usage)} tokens")
            out.append(f" · by {self.by}")
            zoom = ZOOMS[self.chart.zoom]
            if zoom > 1:
                out.append(f" · zoom {zoom}×")
        self.query_one("#timeline-head", Static).update(out)

    def _info(self) -> None:
        tl = self.timeline
        if tl is not None:
            self.query_one("#timeline-info", Static).update(describe(self.chart.current, tl, self.now(tl)))

    # --- keys -----------------------------------------------------------------------------------

    def action_move(self, step: int) -> None:
        self.chart.move(step)
        self._info()

    def action_lane(self, step: int) -> None:
        self.chart.move_lane(step)
        self._info()

    def action_zoom(self, step: int) -> None:
        self.chart.set_zoom(step)
        self._head()

    def action_toggle_lanes(self) -> None:
        self.by = "task" if self.by == "slot" else "slot"
        self.redraw()

    def action_open_run(self) -> None:
        bar = self.chart.current
        if bar is None:
            return
        if bar.task is None:
            self.app.notify("the job's own runs (its planner, its full gate) belong to no task: `pilothouse "
                            f"report {self.job}` tells them", title="timeline", timeout=5)
            return
        self.cockpit.open_run_detail(self.job, bar.task, run=bar.run)
