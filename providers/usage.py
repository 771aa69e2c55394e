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


def is_simulator(spec: str | None) -> bool:
    """A `provider[/model]` of the bundled simulator (`sim`, `sim-*`): its replies are scripted and its
    runs priced at nothing, so a figure of one is no model's. By name, without loading any provider."""
    key = (spec or "").partition("/")[0]
    return key == "sim" or key.startswith("sim-")


def cost_text(cost_usd: float | None, label: str) -> str:
    """A cost as every view shows it: `$0.0000 (simulator)`, `$0.0123 (measured)`; with its label
    always (`cost_label`), so a simulator's $0 is never read as a model's price."""
    return f"${cost_usd or 0.0:.4f} ({label})"


def cost_label(usage: str | None, providers: Iterable[str | None]) -> str:
    """The word a cost is shown with: `simulator` when every run in it was the simulator's ($0 there
    is no price of anything), `<label>, part simulator` when some were, else the usage label."""
    label = usage if usage in LABELS else "measured"
    sims = [is_simulator(p) for p in providers if p]
    if sims and all(sims):
        return "simulator"
    return f"{label}, part simulator" if any(sims) else label
