"""The task guard: a task that carries a credential is refused before any worker sees it.

Tasks are written to logs, reports and the worker's prompt; a key pasted into one would leak
into all of them. We refuse a configured key (any provider) and the shapes of common
credentials. Matches are reported by kind and line number, never by value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pilothouse.providers.errors import UserError

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an OpenAI/Anthropic-style key (sk-…)", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}")),
    ("a GitHub token (ghp_…)", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("a GitHub fine-grained token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("an AWS access key id (AKIA…)", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a private key (PEM block)", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")),
    ("a Slack token (xox…)", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a *_TOKEN= / *_KEY= / *_SECRET= assignment",
     re.compile(r"\b[A-Z][A-Z0-9_]*_(?:TOKEN|API_KEY|SECRET|PASSWORD)\s*[=:]\s*['\"]?[^\s'\"<>]{8,}")),
)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def find_credentials(text: str, secrets: Iterable[str] = ()) -> list[str]:
    """Descriptions ("a GitHub token (ghp_…) on line 3") of credentials found; no values."""
    found = []
    for secret in secrets:
        if secret and len(secret) >= 6:
            pos = text.find(secret)
            if pos >= 0:
                found.append(f"a configured provider key on line {_line_of(text, pos)}")
    for what, pattern in _PATTERNS:
        m = pattern.search(text)
        if m:
            found.append(f"{what} on line {_line_of(text, m.start())}")
    return found


def check_task(text: str, secrets: Iterable[str] = (), source: str = "the task") -> None:
    found = find_credentials(text, secrets)
    if found:
        raise UserError(f"{source} contains {found[0]}; remove the credential (workers never need it: "
                        "the provider key is passed to the worker by pilothouse)")
