"""The timeline's replay mode (`R` on the timeline, or `pilothouse replay JOB` on a terminal): a time
cursor over the chart, which shows the job as it stood at that moment (core/queries/replay.py,
from the events alone), and under it what the dashboard said then: each task's state, the problems
open, the last events.

`space` plays (`[` `]` slower, faster), `←` `→` scrub a column, `n` `N` jump to the next or previous
problem, failed gate or merge, `home` `end` to the job's first and last event; `q` leaves: a replay
begun with R back to the timeline, the one `pilothouse replay` opened out of the cockpit. Mixed into
TimelineScreen, which owns the chart and the keys.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pilothouse.tui import format as fmt
from pilothouse.tui.widgets.timeline import Span
from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static

if TYPE_CHECKING:
    from pilothouse.core.queries.replay import Replay
    from pilothouse.core.queries.timeline_model import Timeline
    from pilothouse.tui.screens.timeline import TimelineScreen

SPEEDS = (1.0, 10.0, 60.0, 600.0)  # seconds of the job a second
FRAME_S = 0.1                      # a playing replay moves on this often
EVENT_ROWS = 30                    # more than the panel shows on any screen: it shows the newest that fit


def clock(at: datetime) -> str:
    return at.strftime("%H:%M:%S.") + f"{at.microsecond // 1000:03d}"


def speed_text(speed: float) -> str:
    return f"{speed:g}×"


def event_line(ev: dict[str, Any]) -> Text:
    """One event as the dashboard's event log writes it, the task for the job; a log from elsewhere was
    redacted with that machine's keys, so this machine's redaction goes over it again."""
    from pilothouse.providers.redact import configured_redactor

    brief = fmt.words(configured_redactor().redact(fmt.describe(ev)))
    line = fmt.styled(fmt.clock(ev.get("ts")), "dim") + " " + Text(f"{str(ev.get('type', '?')):<15}",
                                                                   style=fmt.event_style(ev))
    if ev.get("task"):
        line.append(f" {fmt.words(ev['task'])}")
    if brief:
        line.append(f"  {brief}", style="dim")
    return line


def tasks_text(tl: Timeline) -> Text:
    """Each task's state at the moment, then the problems open then (worker text through inert())."""
    out = Text()
    out.append("tasks then", style="bold")
    width = max((len(t.task) for t in tl.tasks), default=4)
    for t in tl.tasks:
        out.append("\n")
        out.append(t.task.ljust(width) + " ")
        out.append_text(fmt.state_text(t.state))
    if not tl.tasks:
        out.append("\n(not planned yet)", style="dim")
    open_ = [p for p in tl.problems if p.answered is None and p.outcome is None]
    if open_:
        out.append("\nproblems open then", style="bold")
    for p in open_:
        out.append("\n! ", style="bold red")
        out.append(f"{p.code} {p.task or '(job)'} {p.kind or ''}: ")
        out.append(str(p.summary), style="dim")
    return out


class ReplayMixin:
    """The replay state of a TimelineScreen: its player, its moment, whether it plays and how fast."""

    player: Replay | None
    moment: datetime | None
    playing: bool
    speed: float
    events_moment: datetime | None  # the moment the last events panel was read for
    _frame: Timer | None
    _frame_at: float

    def _screen(self) -> TimelineScreen:
        return self  # type: ignore[return-value]

    def init_replay(self, speed: float) -> None:
        self.player = None
        self.moment = None
        self.playing = False
        self.speed = speed
        self.events_moment = None
        self._frame = None
        self._frame_at = 0.0

    def read_player(self, at: datetime | None) -> None:
        """The log folded for seeking, in a thread (the screen is up before it is done)."""
        screen = self._screen()
        layout = screen.cockpit.layout
        if layout is None:
            return
        events, job = layout.events, screen.job

        def player() -> Any:
            from pilothouse.core.queries.replay import Replay

            return Replay(events, job)

        screen.read_in_thread(player, lambda made: self._player_ready(made, at))

    def _player_ready(self, player: Replay, at: datetime | None) -> None:
        screen = self._screen()
        if not screen.is_attached:
            return
        self.player = player
        if player.start is None or player.end is None:
            screen._read_failed(f"no events of a job named {screen.job} in this repository's log")
            return
        self.seek(at or player.start)

    # --- the moment -----------------------------------------------------------------------------

    def seek(self, at: datetime) -> None:
        player = self.player
        if player is None or player.start is None or player.end is None:
            return
        self.moment = max(player.start, min(at, player.end))
        if self.moment >= player.end:
            self.pause()
        self.draw_moment()

    def draw_moment(self) -> None:
        screen, player, at = self._screen(), self.player, self.moment
        if player is None or at is None or player.start is None or player.end is None:
            return
        tl = player.at(at, by=screen.by)
        chart = screen.chart
        chart.full = Span(player.start.timestamp(), player.end.timestamp())
        chart.moment = at
        screen.timeline = tl
        chart.show(tl, None)
        chart.snap(at)
        screen.query_one("#replay-tasks", Static).update(tasks_text(tl))
        screen.refresh_head()
        screen.refresh_info()
        self._read_events(at)

    def _read_events(self, at: datetime) -> None:
        """The last events before the moment, through the event index, in a thread: a newer moment's
        read replaces one still under way (exclusive), so playing never waits on the disk."""
        screen, player = self._screen(), self.player
        if player is None:
            return
        def work() -> None:
            try:
                found = player.events_until(at, last=EVENT_ROWS)
            except Exception as exc:  # noqa: BLE001
                found = [{"type": "error", "data": {"reason": f"the log could not be read: {exc}"}}]
            screen.app.call_from_thread(self._show_events, at, found)

        screen.run_worker(work, thread=True, group="replay-events", exclusive=True, exit_on_error=False)

    def _show_events(self, at: datetime, found: list[dict[str, Any]]) -> None:
        screen = self._screen()
        if at != self.moment or not screen.is_attached:
            return
        out = Text()
        out.append("last events then", style="bold")
        rows = screen.query_one("#replay-events", Static).size.height - 1
        for ev in found[-rows:] if rows > 0 else found:
            out.append("\n")
            out.append_text(event_line(ev))
        screen.query_one("#replay-events", Static).update(out)
        self.events_moment = at

    # --- playing ----------------------------------------------------------------------------------

    def play(self) -> None:
        player = self.player
        if player is None or self.moment is None or player.end is None:
            return
        if self.moment >= player.end and player.start is not None:
            self.moment = player.start  # played to the end: space plays it again
        self.playing = True
        self._frame_at = time.monotonic()
        if self._frame is None:
            self._frame = self._screen().set_interval(FRAME_S, self._advance)
        else:
            self._frame.resume()
        self._screen().refresh_head()

    def pause(self) -> None:
        self.playing = False
        if self._frame is not None:
            self._frame.pause()
        self._screen().refresh_head()

    def _advance(self) -> None:
        if not self.playing or self.moment is None:
            return
        now = time.monotonic()
        elapsed, self._frame_at = now - self._frame_at, now
        self.seek(self.moment + timedelta(seconds=elapsed * self.speed))

    def change_speed(self, step: int) -> None:
        if step > 0:
            faster = [s for s in SPEEDS if s > self.speed]
            self.speed = faster[0] if faster else self.speed
        else:
            slower = [s for s in SPEEDS if s < self.speed]
            self.speed = slower[-1] if slower else self.speed
        self._screen().refresh_head()

    def scrub(self, columns: int) -> None:
        screen, player = self._screen(), self.player
        if player is None or self.moment is None:
            return
        span = screen.chart.span()
        if span is not None:
            self.seek(self.moment + timedelta(seconds=columns * screen.chart.per_column(span)))

    def jump(self, step: int) -> None:
        player, at = self.player, self.moment
        if player is None or at is None:
            return
        mark = player.next_mark(at) if step > 0 else player.prev_mark(at)
        if mark is None:
            self._screen().app.notify("no problem, failed gate or merge " + ("after" if step > 0 else "before")
                                      + " this moment", title="replay", timeout=3)
            return
        self.seek(mark.at)
        self._on_task(mark.task)

    def _on_task(self, task: str | None) -> None:
        """The cursor to the lane of `task` at the moment (the mark's)."""
        screen = self._screen()
        tl = screen.timeline
        if tl is None or self.moment is None:
            return
        for i, lane in enumerate(tl.lanes):
            if any(b.task == task and b.start <= self.moment for b in lane.bars):
                screen.chart.lane = i
        screen.chart.snap(self.moment)
        screen.refresh_info()

    def replay_head(self) -> Text:
        player, at = self.player, self.moment
        out = Text()
        out.append("replay", style="bold reverse")
        out.append(f" {self._screen().job}")
        if player is None or at is None or player.start is None or player.end is None:
            return out + Text(" · reading the log…", style="dim")
        total = (player.end - player.start).total_seconds()
        out.append(f" · {clock(at)} · +{(at - player.start).total_seconds():.1f}s of {total:.1f}s · ")
        out.append("▶ playing" if self.playing else "paused", style="bold" if self.playing else "")
        out.append(f" {speed_text(self.speed)}")
        tl = self._screen().timeline
        if tl is not None:
            out.append(" · ")
            out.append_text(fmt.state_text(tl.state))
        return out

    def refresh_replay_events(self) -> None:
        """A job still running: what it appended since (by offset), drawn at the same moment."""
        player = self.player
        if player is not None and player.refresh():
            self.draw_moment()
