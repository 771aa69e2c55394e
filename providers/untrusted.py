"""Worker text: one type, one sanitiser, for everything a worker wrote that a renderer shows.

A worker (or the code it wrote, through a gate's output) chooses the bytes of its events, its final
text, its problem summaries, its file and branch names. Shown raw, they drive whatever draws them: a
terminal obeys an OSC (window or tmux pane title), a CSI (clear the screen, move the cursor), a DCS
or a DECRQSS query (the terminal types a reply back into the operator's shell), in the 7-bit form
(ESC [) and the 8-bit one (0x9b); bidi overrides make a line read differently than it runs. So every
renderer (the CLI's output, the cockpit, a run's report, a mail, an MCP result) shows worker text only
through `inert()`, whose result is an `UntrustedText`: a `str` that holds no control character but
newline and tab, no bidi control, and not the printable rest of an escape sequence either (`]0;title`
is what a sanitiser that only drops ESC leaves behind).

Written by hand, not taken from a library: the one candidate in the deps (Rich's
`strip_control_codes`) drops only BEL, BS, VT, FF and CR and passes ESC and the C1 range through.
"""

from __future__ import annotations

import re
from typing import Any

# A string sequence (OSC, DCS, SOS, PM, APC, and screen/tmux's `ESC k` title), 7- or 8-bit, with its
# body up to its terminator (BEL, ST as ESC \ or 0x9c); an unterminated one ends at the next control
# or the line's end, so a stray ESC ] does not swallow the rest of the text.
_STRING = r"(?:\x1b[\]PX^_k]|[\x90\x98\x9d\x9e\x9f])[^\x00-\x08\x0a-\x1f\x7f-\x9f]*(?:\x07|\x1b\\|\x9c)?"
# A control sequence (CSI), 7- or 8-bit: parameters, intermediates, the final byte if there is one.
_CSI = r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
# Any other escape: ESC, its intermediates and its final byte (ESC ( B, ESC c, ESC 7, ...).
_ESC = r"\x1b[ -/]*[0-~]?"
# What an OSC leaves when something upstream dropped its ESC but kept its terminator: ]0;title BEL.
_REMNANT = r"\][0-9]*;[^\x00-\x08\x0a-\x1f\x7f-\x9f]*(?:\x07|\x1b\\|\x9c)"
# C0 and C1 controls but \t and \n; DEL; bidi embeddings, overrides, isolates and marks.
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"

# (the lookahead first: a position that is neither `]` nor a control is passed over at once)
_INERT = re.compile(f"(?=[]]|{_CONTROL})(?:{_REMNANT}|{_STRING}|{_CSI}|{_ESC}|{_CONTROL})")
# every pattern above needs a control character (a remnant its terminator): text without one,
# nearly all text, is left as it is after one fast scan of a character class
_ANY_CONTROL = re.compile(_CONTROL)
_LINEBREAKS = re.compile(r"[\t\n]+")


class UntrustedText(str):
    """Worker text made inert: holds no escape sequence and no control character but newline and
    tab. Built only by `inert()` (or by pydantic, through it), so a renderer that is handed one
    knows it was cleaned once and cleans it no further.

    As a pydantic field type it cleans what is validated into it."""

    __slots__ = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(inert, core_schema.str_schema())


def inert(text: object, *, lines: bool = True) -> UntrustedText:
    """`text` (any worker-written value, `str()` of it) without escape sequences, control characters
    or bidi controls. `lines`: newlines and tabs kept (a renderer that draws lines); else each run of
    them is one space (a table cell, a mail subject, an event line that must stay one line)."""
    if isinstance(text, UntrustedText) and lines:
        return text
    s = text if isinstance(text, str) else str(text)
    if _ANY_CONTROL.search(s):
        s = _INERT.sub("", s)
    if not lines:
        s = _LINEBREAKS.sub(" ", s)
    return UntrustedText(s)


def is_inert(text: str) -> bool:
    """True when `text` holds nothing `inert()` would take out (the tests' check on rendered output)."""
    return _ANY_CONTROL.search(text) is None


_ZERO_WIDTH_CONTROL = re.compile(f"\\x1b|{_CONTROL}")


def drop_controls(text: str) -> str:
    """`text` without its control characters alone (ESC, C0 but \\t and \\n, C1, bidi): the last line
    of defence where the text is already laid out in cells (the cockpit's screen lines), which these
    characters, all zero cells wide, take no part in. What is left of a sequence is inert text."""
    return _ZERO_WIDTH_CONTROL.sub("", text)
