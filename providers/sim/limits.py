"""Rate-limit and quota headers the sim sends with a scripted 429, in every vendor's dialect.

One 429 carries all of them (they do not conflict), so whichever client is listening finds
its own: OpenAI `x-ratelimit-reset-*`, Anthropic `anthropic-ratelimit-*` (incl. the
subscription "unified" window headers Claude Code reads), Codex `x-codex-primary-*`, the
generic `retry-after`, and pilothouse's own `x-pilothouse-window` / `x-pilothouse-used-pct`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pilothouse.providers.sim.scenario import ErrorCue

# window name -> (Anthropic unified abbreviation, minutes)
WINDOWS = {
    "five_hour": ("5h", 300),
    "seven_day": ("7d", 10080),
    "weekly": ("7d", 10080),
    "seven_day_opus": ("7d_opus", 10080),
}
DEFAULT_RETRY_S = 60


def retry_after(cue: ErrorCue) -> int:
    return DEFAULT_RETRY_S if cue.retry_after_s is None else cue.retry_after_s


def reset_epoch(cue: ErrorCue, now: float | None = None) -> int:
    return int((time.time() if now is None else now) + retry_after(cue))


def rate_limit_headers(cue: ErrorCue, now: float | None = None) -> dict[str, str]:
    seconds = retry_after(cue)
    epoch = reset_epoch(cue, now)
    iso = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    used = 100.0 if cue.used_pct is None else cue.used_pct
    headers = {
        "retry-after": str(seconds),
        "x-should-retry": "false",  # read by the Anthropic and OpenAI SDKs: fail now, do not back off
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{seconds}s",
        "x-ratelimit-limit-tokens": "100000",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": f"{seconds}s",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": iso,
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": iso,
        "anthropic-ratelimit-input-tokens-reset": iso,
        "anthropic-ratelimit-output-tokens-reset": iso,
        "x-pilothouse-reset-at": iso,
        "x-pilothouse-used-pct": f"{used:g}",
    }
    if cue.window:
        abbrev, minutes = WINDOWS.get(cue.window, (cue.window, 0))
        headers.update({
            "x-pilothouse-window": cue.window,
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-reset": str(epoch),
            "anthropic-ratelimit-unified-representative-claim": cue.window,
            f"anthropic-ratelimit-unified-{abbrev}-status": "rejected",
            f"anthropic-ratelimit-unified-{abbrev}-reset": str(epoch),
            f"anthropic-ratelimit-unified-{abbrev}-utilization": f"{used / 100:g}",
            "x-codex-primary-used-percent": f"{used:g}",
            "x-codex-primary-reset-at": str(epoch),
            "x-codex-primary-reset-after-seconds": str(seconds),
        })
        if minutes:
            headers["x-codex-primary-window-minutes"] = str(minutes)
    return headers


def error_message(status: int, cue: ErrorCue | None) -> tuple[str, str]:
    """(message, OpenAI-style code) for a scripted or an auth error."""
    if cue is not None and cue.message:
        return cue.message, _code(status, cue)
    if status == 401:
        return "sim: invalid API key (the simulator was started with a different key)", "invalid_api_key"
    if status == 429:
        window = f" ({cue.window} window)" if cue is not None and cue.window else ""
        return f"sim: rate limit reached{window}; try again in {retry_after(cue or ErrorCue(status=429))}s", \
            _code(status, cue)
    if status >= 500:
        return f"sim: scripted server error {status}", "server_error"
    return f"sim: scripted error {status}", "invalid_request_error"


def _code(status: int, cue: ErrorCue | None) -> str:
    if status == 429:
        return "usage_limit_reached" if cue is not None and cue.window else "rate_limit_exceeded"
    return {401: "invalid_api_key", 403: "permission_denied", 404: "not_found"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error")
