"""The cockpit's last line of defence: no control character reaches the terminal from a widget.

Worker text is made inert where the cockpit reads it (providers/untrusted.py, tui/format.py); this
filter also runs over every line Textual draws (panels, logs, border titles, dialogs), so a worker
string a panel forgot to clean still cannot retitle the tmux pane, clear the screen or make the
terminal answer a query. Textual applies line filters to each strip after layout; the characters
dropped are all zero cells wide, so no line changes width.
"""

from __future__ import annotations

from pilothouse.providers.untrusted import drop_controls
from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter


class InertLines(LineFilter):
    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        out = []
        for seg in segments:
            text = seg.text
            if not seg.control and text and not text.isprintable():
                seg = Segment(drop_controls(text), seg.style, seg.control)
            out.append(seg)
        return out
