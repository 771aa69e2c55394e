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
    ("a private key (PEM block)", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")),
    ("a Slack token (xox…)", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    # a literal value, not code: `API_TOKEN = os.environ["X"]` or `SECRET = settings.x()` reads one
    ("a *_TOKEN= / *_KEY= / *_SECRET= assignment",
     re.compile(r"\b[A-Z][A-Z0-9_]*_(?:TOKEN|API_KEY|SECRET|PASSWORD)\s*[=:]\s*['\"]?"
                r"[A-Za-z0-9_+/=-]{8,}(?![\w.(\[{])")),
)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def find_credentials(text: str, secrets: Iterable[str] = ()) -> list[str]:
    """Descriptions ("a GitHub token (ghp_…) on line 3") of credentials found; no values.

    A configured key is found in every form the redactor knows (raw, JSON, URL, base64)."""
    from pilothouse.providers.redact import Redactor

    found = []
    for m in Redactor(secrets).finditer(text):
        found.append(f"a configured provider key on line {_line_of(text, m.start())}")
        break
    for what, pattern in _PATTERNS:
        m = pattern.search(text)
        if m:
            found.append(f"{what} on line {_line_of(text, m.start())}")
    return found


def check_task(text: str, secrets: Iterable[str] = (), source: str = "the task") -> None:
    """Refuse (one line naming `source`, the kind and the line, never the value) text that carries
    a credential."""
    found = find_credentials(text, secrets)
    if found:
        raise UserError(f"{source} contains {found[0]}; remove the credential (workers never need it: "
                        "the provider key is passed to the worker by pilothouse)")


def check_words(text: str | None, source: str) -> None:
    """check_task against every configured key: for what an operator types into a job (request,
    correction, decision, acceptance, a hint or plan reply, an attachment's name), which is stored
    in .ai/jobs, state.db and events and reaches the models. Called before anything is written."""
    if not text:
        return
    from pilothouse.providers.keys import configured_secrets

    check_task(text, configured_secrets(), source=source)
