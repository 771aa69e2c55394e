"""The key footer, rebuilt only when what it shows changes.

Textual's Footer recomposes on every change of the screen's bindings, and focus moving from one
panel to another is such a change even when the keys on offer stay the same: each time a new widget
per key is mounted, styled and laid out, and the whole screen is painted again (most of a panel
jump's frame). Here the keys it would show are compared first.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class SteadyFooter(Footer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[Any, ...] | None = None

    def shown(self, screen: Screen[Any]) -> tuple[Any, ...]:
        """What compose() would draw from the screen's bindings now."""
        app = self.app
        keys = tuple((b.key, app.get_key_display(b), b.description, b.action, enabled, tooltip,
                      b.group.description if b.group else None, b.group.compact if b.group else None)
                     for _node, b, enabled, tooltip in screen.active_bindings.values() if b.show)
        return keys, self.show_command_palette, app.ENABLE_COMMAND_PALETTE

    def compose(self) -> ComposeResult:
        # what was last drawn, noted as it is drawn: a rebuild asked for but never run (its screen
        # left the front first) must not count as done
        self._shown = self.shown(self.screen) if self._bindings_ready else None
        self._forget_removed_keys()
        yield from super().compose()

    def _forget_removed_keys(self) -> None:
        """Each key widget binds the footer's `compact` (data_bind), and Textual keeps that watcher, the
        widget with it, until `compact` changes, which it never does (Textual issue #6666): every rebuild
        kept the old keys alive, thousands of objects a minute that each full collection walked
        again, slower the longer the cockpit ran. A rebuild removes the old keys before it composes
        the new ones, so here the watchers of keys no longer attached are dropped."""
        watchers = getattr(self, "__watchers", {}).get("compact")  # Reactive's own attribute name
        if watchers:
            watchers[:] = [(node, callback) for node, callback in watchers if node.is_attached]

    def on_resize(self, event: Any) -> None:
        # narrow (80 columns): one space around each key, not two, and no `^p palette` (the help
        # names it), so the keys on offer (the operator's remapped ones too) fit instead of being cut
        compact = event.size.width < 110
        if compact != self.compact:
            self.compact = compact
            self.show_command_palette = not compact

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if (self._shown is not None and screen.app.app_focus and self.is_attached and screen is self.screen
                and self.shown(screen) == self._shown):
            return  # the same keys: a rebuild would only cost a frame
        super().bindings_changed(screen)
