"""The key footer, rebuilt only when what it shows changes.

Textual's Footer recomposes on every change of the screen's bindings, and focus moving from one
panel to another is such a change even when the keys on offer stay the same: each time a new widget
per key is mounted, styled and laid out, and the whole screen is painted again (most of a panel
jump's frame). Here the keys it would show are compared first.

A screen whose keys can be more than its footer holds names the ones to leave out (FOOTER_SPARE,
binding ids, the first to go first): only as many go as it takes for the rest to fit the width,
never cut at the edge. Their keys still work; the help lists them.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

NARROW = 110  # below this many columns: compact keys, no palette key


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
        return keys, self.show_command_palette, app.ENABLE_COMMAND_PALETTE, self.left_out(screen)

    def _cells(self, binding: Binding) -> int:
        """The columns Footer draws a key in: ` key desc ` wide, `key desc` and a margin compact."""
        key, words = cell_len(self.app.get_key_display(binding)), cell_len(binding.description)
        return key + words + (2 if self.compact else 3)

    def left_out(self, screen: Screen[Any]) -> frozenset[str]:
        """The actions of the screen's FOOTER_SPARE keys that must go for the others to fit the width."""
        spare: tuple[str, ...] = getattr(screen, "FOOTER_SPARE", ())
        if not spare:
            return frozenset()
        shown: dict[str, tuple[str | None, int]] = {}  # action -> (binding id, columns): one key per action
        palette = 0
        for key, (_node, b, _enabled, _tooltip) in screen.active_bindings.items():
            if key == self.app.COMMAND_PALETTE_BINDING:
                if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
                    palette = self._cells(b) + 1  # its border
            elif b.show and b.action not in shown:
                shown[b.action] = (b.id, self._cells(b))
        room = (self.size.width or self.app.size.width) - palette
        need = sum(cells for _, cells in shown.values())
        out: set[str] = set()
        for spared in spare:
            for action, (binding_id, cells) in shown.items():
                if need > room and binding_id == spared:
                    out.add(action)
                    need -= cells
        return frozenset(out)

    def compose(self) -> ComposeResult:
        # what was last drawn, noted as it is drawn: a rebuild asked for but never run (its screen
        # left the front first) must not count as done
        self._shown = self.shown(self.screen) if self._bindings_ready else None
        self._forget_removed_keys()
        left_out = self._shown[-1] if self._shown is not None else frozenset()
        for widget in super().compose():
            if not (isinstance(widget, FooterKey) and widget.action in left_out):
                yield widget

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
        compact = event.size.width < NARROW
        if compact != self.compact:
            self.compact = compact
            self.show_command_palette = not compact
        if self._shown is not None and self.is_attached and self.left_out(self.screen) != self._shown[-1]:
            self.call_after_refresh(self.recompose)  # another width: other keys fit

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if (self._shown is not None and screen.app.app_focus and self.is_attached and screen is self.screen
                and self.shown(screen) == self._shown):
            return  # the same keys: a rebuild would only cost a frame
        super().bindings_changed(screen)
