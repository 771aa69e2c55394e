"""What an operator's reply says: its one command, read from the text outside quotes and signature.

    CODE retry|accept|skip|dismiss      CODE hint WORDS      CODE plan WORDS
    status                              pause                resume

The first line outside the quoted text is the command; for hint and plan the words are the rest of
that line and the lines after it, up to the quote or the signature. A command that appears only in
quoted text (the mail being answered shows examples) is never read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pilothouse.core.stops.problems import ALPHABET, CODE_LEN
from pilothouse.core.stops.replies import NEEDS_WORDS, REPLIES

WHOLE = ("status", "pause", "resume")
MAX_WORDS = 4000

# where the quoted mail begins in the common clients: "On … wrote:", Outlook's separators, a
# forwarded header block
_QUOTE_START = re.compile(r"^(on\b.*\bwrote:?|-{2,}\s*original message\s*-{2,}|_{8,}|from:\s.*|le\s.*a écrit\s*:)$",
                          re.IGNORECASE)
_CODE = re.compile(rf"^[{ALPHABET}]{{{CODE_LEN}}}$")


class Unreadable(ValueError):
    """The text holds no command this grammar takes; the message says what to write."""


@dataclass(frozen=True)
class Command:
    verb: str                  # status | pause | resume | answer
    code: str | None = None
    reply: str | None = None
    words: str | None = None

    def describe(self) -> str:
        if self.verb != "answer":
            return self.verb
        return f"{self.code} {self.reply}" + (f" {self.words}" if self.words else "")


def own_lines(text: str) -> list[str]:
    """The writer's own non-empty lines: before the signature ('-- ') or the quoted mail, and not
    quoted ('>')."""
    out: list[str] = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.strip()
        if raw.rstrip() in ("--", "-- ") or _QUOTE_START.match(line):
            break
        if not line or line.startswith(">"):
            continue
        out.append(line)
    return out


def parse(text: str) -> Command:
    """The command in a reply's plain text, or Unreadable with what to write instead."""
    lines = own_lines(text)
    if not lines:
        raise Unreadable("no command outside the quoted text: write CODE REPLY (for example "
                         "'ACDEFH retry') or status, pause, resume on the first line")
    first = lines[0].split()
    word = first[0].lower().strip(".,:;!")
    if word in WHOLE:
        if len(first) > 1:
            raise Unreadable(f"'{word}' takes nothing after it: write only {word}")
        return Command(word)
    code = first[0].strip(".,:;").upper()
    if not _CODE.match(code):
        raise Unreadable(f"'{first[0][:40]}' is not a problem's code or a command: write CODE REPLY "
                         "(six letters from the problem's mail) or status, pause, resume")
    if len(first) < 2:
        raise Unreadable(f"{code} without a reply: write {code} followed by one of {', '.join(REPLIES)}")
    reply = first[1].lower().strip(".,:;!")
    if reply not in REPLIES:
        raise Unreadable(f"'{first[1][:40]}' is not a reply: use one of {', '.join(REPLIES)}")
    words = None
    if reply in NEEDS_WORDS:
        words = " ".join([" ".join(first[2:]), *lines[1:]]).strip() or None
        if words and len(words) > MAX_WORDS:
            raise Unreadable(f"the {reply} words are longer than {MAX_WORDS} characters: shorten them")
    elif len(first) > 2:
        raise Unreadable(f"'{reply}' takes no words (only hint and plan do): write {code} {reply}")
    return Command("answer", code, reply, words)
