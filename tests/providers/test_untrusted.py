"""Worker text made inert: every escape sequence a terminal obeys, in 7- and 8-bit form, and what a
cleaner that drops only ESC leaves behind; a property test over arbitrary text."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pilothouse.providers.untrusted import UntrustedText, drop_controls, inert, is_inert
from pydantic import BaseModel

ALLOWED = {"\n", "\t"}
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def controls_in(text: str) -> list[str]:
    """The characters a terminal or a bidi renderer obeys: C0, DEL, C1 (category Cc) and bidi controls."""
    return [c for c in text if (unicodedata.category(c) == "Cc" and c not in ALLOWED) or c in BIDI]


@pytest.mark.parametrize(("raw", "shown"), [
    ("a\x1b]0;owned title\x07b", "ab"),                   # OSC window title, BEL-terminated
    ("a\x1b]2;pane\x1b\\b", "ab"),                        # OSC, ST-terminated
    ("a\x9d0;eight-bit title\x9cb", "ab"),                # 8-bit OSC and ST
    ("a\x1b[2J\x1b[Hb", "ab"),                            # clear the screen, home the cursor
    ("a\x9b2Jb", "ab"),                                   # 8-bit CSI
    ("a\x1bP$qm\x1b\\b", "ab"),                           # DCS DECRQSS: the terminal types a reply back
    ("a\x90+q544e\x9cb", "ab"),                           # 8-bit DCS XTGETTCAP
    ("a\x1b_apc body\x1b\\b\x1b^pm\x1b\\c\x1bXsos\x1b\\d", "abcd"),   # APC, PM, SOS
    ("a\x9fapc\x9cb\x9epm\x9cc\x98sos\x9cd", "abcd"),     # their 8-bit forms
    ("a\x1bktmux title\x1b\\b", "ab"),                    # screen/tmux's window title
    ("a\x1bcb\x1b(Bc\x1b7d", "abcd"),                     # reset, charset, save cursor
    ("a]0;title\x07b", "ab"),                             # an OSC whose ESC something upstream dropped
    ("user\u202eexe.txt", "userexe.txt"),                 # bidi override
    ("\u2066isolated\u2069 \u200fmark", "isolated mark"),  # isolates, marks
    ("ok\r\nline\x00two\x7f", "ok\nlinetwo"),            # CR, NUL, DEL
    ("a\x1b]0;unterminated\nnext line", "a\nnext line"),  # an unterminated string ends at the line
    ("trailing ESC\x1b", "trailing ESC"),
])
def test_escape_sequences_are_taken_out_whole(raw: str, shown: str) -> None:
    out = inert(raw)
    assert out == shown and isinstance(out, UntrustedText)
    assert is_inert(out) and not is_inert(raw)


def test_one_line_form_folds_newlines_and_tabs_to_one_space() -> None:
    assert inert("a\n\n\tb\nc", lines=False) == "a b c"
    assert inert("two\nlines") == "two\nlines"


def test_ordinary_text_is_untouched_brackets_and_unicode_included() -> None:
    text = "x[0]; y]1;z — déjà vu 日本語 ✓ \t\n[31m is just text without its ESC"
    assert inert(text) == text


def test_a_pydantic_field_of_worker_text_is_cleaned_when_validated() -> None:
    class Said(BaseModel):
        text: UntrustedText

    said = Said(text="hi\x1b]0;t\x07 there\x9b2J")
    assert said.text == "hi there" and isinstance(said.text, UntrustedText)


def test_drop_controls_takes_out_only_zero_width_characters() -> None:
    # the cockpit's screen filter: the rest of a sequence stays as inert, already laid-out cells
    assert drop_controls("a\x1b[2Jb\x9b1mc\u202ed\te") == "a[2Jb1mcd\te"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list("\x1b\x07\x9b\x9c\x9d\x90[]P\\;0123456789JHmk_^X\u202e\u2066\n\t\r")))))
def test_inert_leaves_no_control_is_idempotent_and_keeps_printable_text(text: str) -> None:
    out = inert(text)
    assert controls_in(out) == []
    assert inert(out) == out and inert(str(out)) == out
    assert is_inert(out)
    one_line = inert(text, lines=False)
    assert "\n" not in one_line and "\t" not in one_line and controls_in(one_line) == []


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8").filter(lambda c: c.isprintable() or c in ALLOWED)))
def test_printable_text_passes_unchanged(text: str) -> None:
    assert inert(text) == text
