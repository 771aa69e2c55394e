"""A job's timeline drawn in cells: one line per lane (worker slot or task), a bar per state, marks on
top, a time axis scaled to the job. The model is core/queries/timeline_model.py's `Timeline`; this
widget only places it on a grid and keeps a cursor on one bar.

Each state has a glyph as well as a colour word, so the picture reads without colour (the legend
names both); the colour words go through the theme's palette (tui/palette.py) like every other row.
Everything drawn is `rich.text.Text` from plain strings: a task name or reason is never markup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from operator import itemgetter

from pilothouse.core.queries.timeline_model import STATE_WORDS, Bar, Mark, Timeline
from rich.text import Text
from textual.widget import Widget

# state -> (glyph, colour word); blue (building) and cyan (merging) are two hues under every theme
# (tui/palette.py: cyan is $primary, blue $primary mixed with $success), and the glyphs differ too
GLYPHS = {"planning": ("▄", "magenta"), "building": ("█", "blue"), "gating": ("▓", "yellow"),
          "reviewing": ("▒", "green"), "merging": ("▀", "cyan"), "waiting_operator": ("━", "bold red"),
          "waiting_quota": ("┄", "yellow")}
MARKS = {"problem_opened": ("!", "bold red"), "problem_answered": ("✓", "bold green"),
         "gate_failed": ("✗", "bold red"), "merge": ("◆", "bold cyan"), "merge_rolled_back": ("↺", "bold magenta"),
         "quota_wait": ("~", "bold yellow")}
MARK_WORDS = {"problem_opened": "problem", "problem_answered": "answer", "gate_failed": "gate failed",
              "merge": "merge", "merge_rolled_back": "merge undone", "quota_wait": "quota wait"}
SHORT_WORDS = {**STATE_WORDS, "waiting_operator": "operator", "waiting_quota": "quota"}
# a mark hides a lesser one in the same cell: what needs the operator first
_MARK_RANK = {"problem_opened": 5, "gate_failed": 4, "merge_rolled_back": 3, "quota_wait": 2,
              "problem_answered": 1, "merge": 0}
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400)
ZOOMS = (1, 2, 4, 8, 16, 32, 64)
AXIS_ROWS = 2


def tick_label(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s}s" if s < 120 else (f"{s // 60}m" if s < 7200 else f"{s // 3600}h{(s % 3600) // 60:02d}")


def tick_step(per_column: float, spacing: int = 8) -> float:
    """The shortest tick step whose labels stand `spacing` columns apart at `per_column` seconds a column."""
    for step in _STEPS:
        if step / per_column >= spacing:
            return float(step)
    return 86400.0 * math.ceil(per_column * spacing / 86400)


@dataclass
class Span:
    """Where the chart's time runs: the job's start to its end (or now, while it runs)."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 1e-3)


def span_of(tl: Timeline, now: datetime | None = None) -> Span | None:
    if tl.start is None or tl.end is None:
        return None
    end = tl.end.timestamp()
    if now is not None:
        end = max(end, now.timestamp())
    return Span(tl.start.timestamp(), end)


def bar_end(bar: Bar, span: Span) -> float:
    return bar.end.timestamp() if bar.end is not None else span.end


def mark_lanes(tl: Timeline) -> list[int]:
    """The lane each of `tl.marks` is drawn on: the first lane where its task's bar covers the moment, else
    the last lane its task has a bar on, else the lane its event named, else the first. One pass over the
    bars, then each mark looks only at its own task's bars (a big job has thousands of bars and marks)."""
    of_task: dict[str | None, list[tuple[int, Bar]]] = {}  # a job's own bars (planning) have no task
    by_key: dict[str, int] = {}
    for i, lane in enumerate(tl.lanes):
        by_key.setdefault(lane.key, i)
        for b in lane.bars:
            of_task.setdefault(b.task, []).append((i, b))
    out = []
    for m in tl.marks:
        bars = of_task.get(m.task, [])
        at = m.at
        lane = next((i for i, b in bars if b.start <= at and (b.end is None or at <= b.end)), None)
        if lane is None:
            lane = bars[-1][0] if bars else (by_key.get(m.lane, 0) if m.lane is not None else 0)
        out.append(lane)
    return out


class TimelineChart(Widget):
    """The lanes and the axis. The screen owns the keys; this widget owns the view (zoom, scroll, cursor)."""

    DEFAULT_CSS = """
    TimelineChart { height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.timeline: Timeline | None = None
        self.now: datetime | None = None    # the right end while the job runs
        self.lane = 0
        self.index = 0
        self.zoom = 0                        # an index into ZOOMS
        self.x0 = 0                          # the first chart column shown (scrolled by zoom)
        self.top = 0                         # the first lane shown
        self.moment: datetime | None = None  # replay's time cursor, drawn as a line down the chart
        self.full: Span | None = None        # replay: the whole job's time, whatever moment is drawn
        self._lanes_of_marks: tuple[Timeline, list[int]] | None = None  # mark_lanes of the Timeline shown

    # --- geometry -----------------------------------------------------------------------------

    @property
    def label_width(self) -> int:
        return 14 if self.size.width < 100 else 20

    @property
    def chart_width(self) -> int:
        return max(self.size.width - self.label_width, 8)

    @property
    def lane_rows(self) -> int:
        return max(self.size.height - AXIS_ROWS, 1)

    def columns(self) -> int:
        return self.chart_width * ZOOMS[self.zoom]

    def per_column(self, span: Span) -> float:
        return span.seconds / self.columns()

    def column(self, t: float, span: Span) -> float:
        return (t - span.start) / self.per_column(span)

    def span(self) -> Span | None:
        tl = self.timeline
        if self.full is not None:
            return self.full
        return span_of(tl, self.now) if tl is not None else None

    def grid(self, span: Span) -> tuple[int, float]:
        """The chart's columns and the seconds in each, read once per drawing (the widget's size is a
        lookup through its styles: thousands of bars asking for it cost more than drawing them)."""
        cols = self.columns()
        return cols, span.seconds / cols

    def cells(self, bar: Bar, span: Span, grid: tuple[int, float] | None = None) -> tuple[int, int]:
        """The columns a bar covers: at least one, however short. A bar still open ends at the picture's
        moment: now, or in a replay the moment shown (the Timeline's end)."""
        cols, per = grid or self.grid(span)
        c0 = min(int((bar.start.timestamp() - span.start) / per), cols - 1)
        if bar.end is None and self.full is not None and self.timeline is not None and self.timeline.end is not None:
            end = self.timeline.end.timestamp()
        else:
            end = bar_end(bar, span)
        c1 = int(round((end - span.start) / per))
        return c0, max(c0 + 1, min(c1, cols))

    # --- the model and the cursor -------------------------------------------------------------

    def show(self, tl: Timeline, now: datetime | None = None) -> None:
        """Draw `tl`, keeping the cursor on the bar it was on when that bar is still there."""
        old = self.current
        self.timeline, self.now = tl, now
        self.lane = self.index = 0
        found = False
        if old is not None:  # the same bar, found by what it is (its lane's key changes with `by`)
            for i, lane in enumerate(tl.lanes):
                for j, b in enumerate(lane.bars):
                    if not found and (b.start, b.task, b.state) == (old.start, old.task, old.state):
                        self.lane, self.index, found = i, j, True
        if not found and tl.lanes:
            self.lane = next((i for i, lane in enumerate(tl.lanes) if lane.bars), 0)
        self._follow_cursor()
        self.refresh()

    @property
    def current(self) -> Bar | None:
        tl = self.timeline
        return tl.bar_at(self.lane, self.index) if tl is not None else None

    def move(self, step: int) -> None:
        tl = self.timeline
        if tl is None or not tl.lanes:
            return
        bars = tl.lanes[self.lane].bars
        if bars:
            self.index = max(0, min(len(bars) - 1, self.index + step))
        self._follow_cursor()
        self.refresh()

    def move_lane(self, step: int) -> None:
        tl = self.timeline
        if tl is None:
            return
        here = self.current
        lane = self.lane + step
        while 0 <= lane < len(tl.lanes) and not tl.lanes[lane].bars:
            lane += step  # an empty lane holds nothing to stand on
        if not 0 <= lane < len(tl.lanes):
            return
        self.lane = lane
        bars = tl.lanes[lane].bars
        if here is not None:
            mid = here.start.timestamp()
            self.index = min(range(len(bars)), key=lambda j: abs(bars[j].start.timestamp() - mid))
        else:
            self.index = 0
        self._follow_cursor()
        self.refresh()

    def snap(self, moment: datetime) -> None:
        """Replay: the cursor on its lane's bar at `moment` (the last one begun by then)."""
        tl = self.timeline
        if tl is None or not tl.lanes:
            return
        self.lane = min(self.lane, len(tl.lanes) - 1)
        bars = tl.lanes[self.lane].bars
        begun = [j for j, b in enumerate(bars) if b.start <= moment]
        self.index = begun[-1] if begun else 0
        span = self.span()
        if span is not None:  # the moment in view, rather than the bar's start
            col = int(self.column(moment.timestamp(), span))
            if not self.x0 <= col < self.x0 + self.chart_width:
                self.x0 = col - self.chart_width // 2
            self._clamp()
        self.refresh()

    def set_zoom(self, step: int) -> None:
        span = self.span()
        centre = None
        if span is not None:
            bar = self.current
            centre = bar.start.timestamp() if bar is not None else None
        self.zoom = max(0, min(len(ZOOMS) - 1, self.zoom + step))
        self.x0 = 0
        if span is not None and centre is not None:
            self.x0 = int(self.column(centre, span)) - self.chart_width // 2
        self._clamp()
        self._follow_cursor()
        self.refresh()

    def _clamp(self) -> None:
        self.x0 = max(0, min(self.x0, self.columns() - self.chart_width))
        lanes = len(self.timeline.lanes) if self.timeline else 0
        self.top = max(0, min(self.top, max(lanes - self.lane_rows, 0)))

    def _follow_cursor(self) -> None:
        """Scroll so the cursor's lane and the start of its bar are in view."""
        tl = self.timeline
        if tl is None:
            return
        if self.lane < self.top:
            self.top = self.lane
        elif self.lane >= self.top + self.lane_rows:
            self.top = self.lane - self.lane_rows + 1
        bar, span = self.current, self.span()
        if bar is not None and span is not None and self.moment is None:
            c0, c1 = self.cells(bar, span)
            if c0 < self.x0 or c0 >= self.x0 + self.chart_width:
                self.x0 = c0 - self.chart_width // 4
        self._clamp()

    def on_resize(self) -> None:
        self._follow_cursor()

    # --- drawing ------------------------------------------------------------------------------

    def render(self) -> Text:
        tl = self.timeline
        if tl is None:
            return Text("reading the job's events…", style="dim")
        span = self.span()
        if span is None:
            return Text("nothing has happened in this job yet", style="dim")
        lines = self._axis(span)
        if not tl.lanes:
            lines.append(Text(" " * self.label_width + "no task had started yet", style="dim"))
        grid = cols, per = self.grid(span)
        if self._lanes_of_marks is None or self._lanes_of_marks[0] is not tl:
            self._lanes_of_marks = (tl, mark_lanes(tl))
        marks: dict[int, dict[int, Mark]] = {}
        for m, lane in zip(tl.marks, self._lanes_of_marks[1], strict=True):
            col = min(int((m.at.timestamp() - span.start) / per), cols - 1)
            row = marks.setdefault(lane, {})
            if col not in row or _MARK_RANK[m.kind] >= _MARK_RANK[row[col].kind]:
                row[col] = m
        moment = None
        if self.moment is not None:
            moment = int(self.column(self.moment.timestamp(), span)) - self.x0
        for i in range(self.top, min(len(tl.lanes), self.top + self.lane_rows)):
            lines.append(self._lane(i, span, grid, marks.get(i, {}), moment))
        out = Text("\n").join(lines)
        out.no_wrap = True
        out.overflow = "crop"
        return out

    def _axis(self, span: Span) -> list[Text]:
        per = self.per_column(span)
        step = tick_step(per)
        w, lw = self.chart_width, self.label_width
        labels = [" "] * w
        rule = ["─"] * w
        k = math.ceil(self.x0 * per / step)
        while True:
            col = int(round(k * step / per)) - self.x0
            if col >= w:
                break
            if col >= 0:
                rule[col] = "┬"
                for n, ch in enumerate(tick_label(k * step)):
                    if col + n < w:
                        labels[col + n] = ch
            k += 1
        if self.x0 > 0:
            rule[0] = "◀"
        if self.x0 + w < self.columns():
            rule[-1] = "▶"
        start = datetime.fromtimestamp(span.start + self.x0 * per, UTC)  # UTC, as the event log's clock
        head = Text(start.strftime("%H:%M:%S").ljust(lw)[:lw], style="dim")
        lanes = len(self.timeline.lanes) if self.timeline else 0
        more = ""
        if lanes > self.lane_rows:
            more = f"{self.top + 1}–{min(lanes, self.top + self.lane_rows)}/{lanes}"
        ruler = Text("".join(rule), style="dim")
        if self.moment is not None:
            col = int(self.column(self.moment.timestamp(), span)) - self.x0
            if 0 <= col < w:
                ruler = ruler[:col] + Text("▼", style="bold") + ruler[col + 1:]
        return [head + Text("".join(labels), style="dim"), Text(more.ljust(lw)[:lw], style="dim") + ruler]

    def _lane(self, i: int, span: Span, grid: tuple[int, float], marks: dict[int, Mark], moment: int | None) -> Text:
        tl = self.timeline
        assert tl is not None
        lane = tl.lanes[i]
        w, lw = self.chart_width, self.label_width
        cells: list[tuple[str, str]] = [(" ", "")] * w
        cursor = (i == self.lane)
        hit: tuple[int, int] | None = None
        for j, b in enumerate(lane.bars):
            c0, c1 = self.cells(b, span, grid)
            if cursor and j == self.index:
                hit = (c0, c1)
            glyph, colour = GLYPHS[b.state]
            for c in range(max(c0, self.x0), min(c1, self.x0 + w)):
                cells[c - self.x0] = (glyph, colour)
        for c, m in marks.items():
            if self.x0 <= c < self.x0 + w:
                cells[c - self.x0] = MARKS[m.kind]
        if moment is not None and 0 <= moment < w:
            cells[moment] = ("│", "bold")
        label = lane.label
        label = label if len(label) < lw - 1 else label[:lw - 2] + "…"
        out = Text()
        out.append(("▸ " if cursor else "  ") + label.ljust(lw - 2)[:lw - 2], style="bold" if cursor else "")
        for colour, run in groupby(cells, key=itemgetter(1)):  # one span per run of a colour, not per cell
            out.append("".join(glyph for glyph, _ in run), style=colour)
        if hit is not None:
            bar = lane.bars[self.index]
            a, z = max(hit[0], self.x0) - self.x0, min(hit[1], self.x0 + w) - self.x0
            if z > a:
                word = SHORT_WORDS[bar.state]
                text = (f" {word} " if z - a >= len(word) + 2 else word)[:z - a].ljust(z - a)
                start = lw + a
                out = out[:start] + Text(text, style=GLYPHS[bar.state][1]) + out[start + (z - a):]
                out.stylize("reverse bold", start, start + (z - a))
        return out


def legend() -> Text:
    """What each glyph means, in words (bars, then marks): the colours help, they are never the only way
    to read the chart."""
    bars, marks = Text(), Text()
    for state, (glyph, colour) in GLYPHS.items():
        bars.append(glyph, style=colour)
        bars.append(f" {SHORT_WORDS[state]}  ")
    for kind, (glyph, colour) in MARKS.items():
        marks.append(glyph, style=colour)
        marks.append(f" {MARK_WORDS[kind]}  ")
    bars.rstrip()
    marks.rstrip()
    return Text("\n").join((bars, marks))
