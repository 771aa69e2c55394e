"""The command in an emailed reply, read the way each mail client quotes (core/notify/grammar.py):
top-posted, bottom-posted and interleaved replies from the clients' default formats
(tests/core/fixtures/replies), and quoted commands that are never read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core.notify.grammar import Command, Unreadable, parse

REPLIES = Path(__file__).parent / "fixtures" / "replies"

OBEYED = {
    "gmail-top.txt": Command("answer", "ACDEFH", "hint", "use the slug helper from src/text.py"),
    "gmail-bottom.txt": Command("answer", "ACDEFH", "retry"),
    "gmail-de-top.txt": Command("answer", "ACDEFH", "skip"),
    "gmail-fr-bottom.txt": Command("answer", "ACDEFH", "retry"),
    "outlook-top.txt": Command("answer", "ACDEFH", "skip"),
    "outlook-desktop-top.txt": Command("answer", "ACDEFH", "retry"),
    "apple-mail-top.txt": Command("answer", "ACDEFH", "hint", "the test expects a trailing newline"),
    "apple-mail-bottom.txt": Command("answer", "ACDEFH", "hint", "the test expects a trailing newline"),
    "thunderbird-bottom.txt": Command("answer", "ACDEFH", "plan",
                                      "split add-slugify in two: first the helper, then its tests"),
    "mutt-interleaved.txt": Command("answer", "ACDEFH", "hint",
                                    "fold accents with unicodedata.normalize before lowering the case"),
    "k9-bottom-de.txt": Command("answer", "ACDEFH", "retry"),
}


@pytest.mark.parametrize("name", sorted(OBEYED))
def test_each_clients_default_reply_is_read_top_bottom_or_interleaved(name: str) -> None:
    assert parse((REPLIES / name).read_text()) == OBEYED[name]


@pytest.mark.parametrize("name", ["quote-only.txt", "outlook-original-only.txt"])
def test_a_command_that_stands_only_in_the_mail_answered_is_never_read(name: str) -> None:
    with pytest.raises(Unreadable, match="no command outside the quoted text"):
        parse((REPLIES / name).read_text())


def test_the_words_of_a_hint_stop_at_the_next_quoted_part() -> None:
    text = "> the gate failed\nACDEFH hint first words\nmore words\n> quoted again\nnot part of it\n"
    assert parse(text).words == "first words more words"
