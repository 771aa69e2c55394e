"""The normalised runner events of the dispatch contract (docs/contracts.md, "Runner events"): plain dataclasses.

Kept apart from providers/contract.py (which re-exports them) so that reading a worker's events
does not import pydantic: dispatch needs pydantic only when a result or verdict is not plainly
valid (see contract_fast.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorClass = Literal["auth", "quota", "transient", "fatal"]


# --- normalised runner events -------------------------------------------------------------

@dataclass(slots=True)
class SessionEvent:
    id: str
    kind: str = "session"


@dataclass(slots=True)
class TextEvent:
    text: str
    kind: str = "text"


@dataclass(slots=True)
class ReasoningEvent:
    text: str
    kind: str = "reasoning"


@dataclass(slots=True)
class ToolEvent:
    name: str
    status: Literal["started", "ok", "error", "denied"]
    brief: str = ""
    kind: str = "tool"


UsageSource = Literal["measured", "estimated", "unknown"]


@dataclass(slots=True)
class UsageEvent:
    """Tokens of one model turn (a delta, never a running total), and where they come from:
    `measured` (the server counted them), `estimated` (the server reported none, the runner
    counted the text: docs/contracts.md "Usage"), `unknown` (nobody counted them)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    source: UsageSource = "measured"
    kind: str = "usage"


@dataclass(slots=True)
class QuotaEvent:
    window: str
    used_pct: float | None = None
    resets_at: str | None = None  # ISO-8601 UTC, or None when the provider gave no reset time
    kind: str = "quota"


@dataclass(slots=True)
class ErrorEvent:
    message: str
    error_class: ErrorClass = "fatal"
    kind: str = "error"


@dataclass(slots=True)
class LimitEvent:
    """A limit ended a model turn or the run: `output_cap` (the answer was cut at the provider's
    output-token cap, finish_reason `length`) or `step_cap`."""

    reason: str
    kind: str = "limit"


RunnerEvent = SessionEvent | TextEvent | ReasoningEvent | ToolEvent | UsageEvent | QuotaEvent | ErrorEvent \
    | LimitEvent
