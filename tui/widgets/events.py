"""The live event log: follows new events unless the operator scrolls up to read.

Lines are rendered lazily (only the visible ones) from the raw events, so holding a couple of
thousand events costs nothing at startup. Scrolling up pauses follow and counts what arrived
meanwhile in the border; End or `f` jumps back and follows again.
"""

from __future__ import annotations

from typing import Any

from pilothouse.tui import format as fmt
from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

HIDDEN_TYPES = frozenset({"supervisor.heartbeat"})
PAUSED = " · paused · "


class EventStream(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False, id="nav.down"),
        Binding("k", "scroll_up", "Up", show=False, id="nav.up"),
        Binding("end", "follow", "Follow", show=False, id="events.end"),
    ]

    follow: reactive[bool] = reactive(True)
    new_count: reactive[int] = reactive(0)

    def __init__(self, max_lines: int = 2000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self._events: list[dict[str, Any]] = []  # everything kept (filter applies on top)
        self._shown: list[dict[str, Any]] = []
        self._cache: dict[int, Strip] = {}
        self.filter_text = ""

    # --- content --------------------------------------------------------------------------------

    def push(self, events: list[dict[str, Any]]) -> None:
        fresh = [e for e in events if e.get("type") not in HIDDEN_TYPES]
        if not fresh:
            return
        self._events.extend(fresh)
        dropped = 0
        if len(self._events) > self.max_lines:
            del self._events[: len(self._events) - self.max_lines]
        shown = [e for e in fresh if fmt.event_matches(e, self.filter_text)]
        self._shown.extend(shown)
        if len(self._shown) > self.max_lines:
            dropped = len(self._shown) - self.max_lines
            del self._shown[:dropped]
            self._cache.clear()
        self.virtual_size = Size(self.size.width, len(self._shown))
        if self.follow:
            self._to_end()
        else:
            if dropped:
                self.scroll_to(y=max(0, self.scroll_y - dropped), animate=False, immediate=True)
            self.new_count += len(shown)
        self.refresh()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._shown = [e for e in self._events if fmt.event_matches(e, text)]
        self._cache.clear()
        self.virtual_size = Size(self.size.width, len(self._shown))
        self.follow = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    @property
    def lines(self) -> list[str]:
        """The shown events as plain text (for tests and the bench)."""
        return [fmt.event_text(e).plain for e in self._shown]

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.size.width
        style = self.rich_style
        if index >= len(self._shown):
            return Strip.blank(width, style)
        ev = self._shown[index]
        key = id(ev)
        strip = self._cache.get(key)
        if strip is None:
            text = fmt.event_text(ev)
            text.no_wrap = True
            # the panel's style is the base each line is drawn on (apply_style), never laid over
            # the line's own colours
            strip = Strip(list(Segment.apply_style(text.render(self.app.console), style)))
            if len(self._cache) > 4 * self.max_lines:
                self._cache.clear()
            self._cache[key] = strip
        return strip.crop_extend(0, width, style).apply_offsets(0, index)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self._shown))
        self._update_subtitle()  # across the narrow/wide breakpoint the notice changes place
        if self.follow:
            self._to_end()

    def settle(self) -> None:
        """Back at the newest line once the layout around the log has changed."""
        self._to_end()

    def _to_end(self) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        # before the first layout the widget has no height yet: settle again once it has
        self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()  # a theme change restyles every line

    # --- follow ---------------------------------------------------------------------------------

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_count = 0
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._update_subtitle()

    def watch_new_count(self) -> None:
        self._update_subtitle()

    def _update_subtitle(self) -> None:
        # the narrow layout draws a top rule and no bottom border: there the pause goes in the title,
        # or events would stop appearing without a word
        base = str(self.border_title or "").split(PAUSED, 1)[0]
        bottom = self.styles.border_bottom[0] not in ("", "none", "hidden")
        if self.follow:
            self.border_subtitle = "following"
            self.border_title = base
        elif bottom:
            self.border_subtitle = f"paused · {self.new_count} new · End/f follows"
            self.border_title = base
        else:
            self.border_title = f"{base}{PAUSED}{self.new_count} new · f follows"

    def action_follow(self) -> None:
        self.follow = True

    def _pause(self) -> None:
        if self.max_scroll_y > 0:
            self.follow = False

    def _maybe_resume(self) -> None:
        if self.scroll_y >= self.max_scroll_y:
            self.follow = True

    def action_scroll_up(self) -> None:
        self._pause()
        self.scroll_up(animate=False, immediate=True)

    def action_page_up(self) -> None:
        self._pause()
        self.scroll_page_up(animate=False)

    def action_scroll_home(self) -> None:
        self._pause()
        self.scroll_home(animate=False, immediate=True)

    def action_scroll_down(self) -> None:
        self.scroll_down(animate=False, immediate=True)
        self.call_after_refresh(self._maybe_resume)

    def action_page_down(self) -> None:
        self.scroll_page_down(animate=False)
        self.call_after_refresh(self._maybe_resume)

    def action_scroll_end(self) -> None:
        self.follow = True

    def _on_mouse_scroll_up(self, event: Any) -> None:
        self._pause()
        super()._on_mouse_scroll_up(event)

    def _on_mouse_scroll_down(self, event: Any) -> None:
        super()._on_mouse_scroll_down(event)
        self.call_after_refresh(self._maybe_resume)
