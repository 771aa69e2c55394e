"""What an operator's reply says: its one command, read from the text outside quotes and signature.

    CODE retry|accept|skip|dismiss      CODE hint WORDS      CODE plan WORDS
    status                              pause                resume

The writer's own text is what is left once the quoted mail and the signature are taken out, wherever
the writer put it: above the quote (top-posted: Gmail, Outlook, Apple Mail by default), below it
(bottom-posted: mutt, K-9, many list habits) or between quoted parts (interleaved). The first line
of the first own block is the command; for hint and plan the words are the rest of that line and
the lines after it, up to the next quote or the signature. A command that appears only in quoted
text (the mail being answered shows examples) is never read.

The quote headers ("On … wrote:" and its forms in other languages, Outlook's "From:/Sent:" block)
are found by mail-parser-reply, a maintained parser with those headers for thirteen languages. Its
own answer (the latest reply) is not used: it keeps only what stands above the first header, so a
bottom-posted command would be lost; the quoting itself ('>' lines) says what is whose.
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


# a quote header in a language or client mail-parser-reply does not know: a line of at most a few
# words and a sender that ends in the language's "wrote:" (K-9's "Name <addr> wrote:", mutt's
# "* Name <addr> [date]:" is covered by the '>' lines after it)
_WROTE = re.compile(r"^.{0,240}\b(wrote|schrieb|a écrit|escribió|ha scritto|schreef|escreveu|skrev|"
                    r"napisał\(a\)|napisała|napisał|написал\(а\)|написала|написал|kirjoitti|napsal)\s*:$",
                    re.IGNORECASE)
# a phone's signature line closes what the writer wrote, like '-- '
_MOBILE_SIGNATURE = re.compile(r"^(sent from my\b|get outlook for (ios|android)|von meinem .* gesendet|"
                               r"envoyé de mon\b|enviado desde mi\b)", re.IGNORECASE)
_LANGUAGES = ["en", "de", "cs", "da", "es", "fr", "it", "ja", "ko", "nl", "pl", "sv", "zh"]
_HEADER = "\x00quote header\x00"
MAX_TEXT = 200_000  # a reply's text read for its command; the rest of a longer mail is not looked at


def _mark_headers(text: str) -> str:
    """`text` with every quote header the parser finds replaced by one marker line (a header may
    be wrapped over several lines: Gmail's long "On … wrote:")."""
    from mailparser_reply import EmailReplyParser

    try:
        replies = EmailReplyParser(languages=_LANGUAGES).read(text).replies
    except Exception:  # noqa: BLE001 - a parser that chokes on odd text leaves the '>' rules to judge
        return text
    for reply in replies:
        header = (reply.headers or "").strip()
        if header and header in text:
            text = text.replace(header, "\n" + _HEADER + "\n", 1)
    return text


def own_blocks(text: str) -> list[list[str]]:
    """The writer's own non-empty lines, in blocks split by the quoted parts between them: not
    quoted ('>'), not a quote header, not after the signature ('-- ', a phone's "Sent from my …"),
    and not after a header whose original follows unquoted (Outlook's way: it is all the mail
    answered)."""
    lines = _mark_headers(text[:MAX_TEXT].replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    blocks: list[list[str]] = [[]]
    for i, raw in enumerate(lines):
        line = raw.strip()
        if raw.rstrip() in ("--", "-- ") or _MOBILE_SIGNATURE.match(line):
            break
        if line == _HEADER or _QUOTE_START.match(line) or _WROTE.match(line):
            after = next((n.strip() for n in lines[i + 1:] if n.strip()), "")
            if not after.startswith(">") and after != _HEADER:
                break  # the original follows unquoted: nothing below is the writer's
            blocks.append([])
            continue
        if line.startswith(">"):
            if blocks[-1]:
                blocks.append([])
            continue
        if line:
            blocks[-1].append(line)
    return [b for b in blocks if b]


def own_lines(text: str) -> list[str]:
    """The writer's own first block of lines (see own_blocks)."""
    blocks = own_blocks(text)
    return blocks[0] if blocks else []


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
