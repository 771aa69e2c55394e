"""Text from workers made safe for a terminal: no escape sequences, no control characters.

Worker-written text (event data, problem summaries, gate output, a worktree's files) reaches the
operator's terminal through the CLI, the cockpit and the MCP tools; it must not move the cursor,
retitle the window or recolour the screen."""

from __future__ import annotations

import re

_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without terminal escape sequences (CSI, OSC) or other control characters, newlines and
    tabs kept."""
    return _ESCAPES.sub("", text)
