"""Token usage and how far to trust it: `measured`, `estimated` or `unknown` (docs/contracts.md, "Usage").

A server that reports no usage must never read as a run that cost nothing: the builtin worker
estimates what the server did not count and says so, a turn nobody counted is `unknown`, and
every place that shows a count shows its label with it. Stdlib only: the CLI and the cockpit
import this for every line they render.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs every command ~2 ms; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

LABELS = ("measured", "estimated", "unknown")


def label_of(verdict: dict[str, Any]) -> str:
    """A verdict's usage label (a verdict from before labels existed was measured)."""
    value = verdict.get("usage")
    return value if value in LABELS else "measured"


def verdict_tokens(verdict: dict[str, Any]) -> int | None:
    """Input + output + reasoning tokens of a verdict; None when nothing was counted."""
    tok = verdict.get("tokens")
    if not isinstance(tok, dict):
        return None
    total = 0
    for key in ("input", "output", "reasoning"):
        value = tok.get(key)
        total += value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
    return None if label_of(verdict) == "unknown" and not total else total


def combine(labels: Iterable[str | None]) -> str:
    """The label of a sum: unknown if any part is, else estimated if any part is, else measured."""
    seen = {label if label in LABELS else "measured" for label in labels}
    return "unknown" if "unknown" in seen else ("estimated" if "estimated" in seen else "measured")


def tokens_text(total: int | None, usage: str | None, unit: str = "tokens") -> str:
    """`1234 tokens`, `~1234 tokens (estimated)`, `≥1234 tokens (some not reported)` or `? tokens`."""
    if usage == "unknown":
        return f"≥{total} {unit} (some not reported)" if total else f"? {unit}"
    if usage == "estimated":
        return f"~{total or 0} {unit} (estimated)"
    return f"{total or 0} {unit}"
