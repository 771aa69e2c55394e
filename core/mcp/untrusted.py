"""Worker-written text in what the host's model reads: fenced off as data.

A problem's summary and evidence, an event's data, a task's reason, `why`'s chain: each can carry
what a worker (or the code it wrote, through a gate's output) chose to print, and the host's model
reads tool results as its own context — a prompt-injection surface. So such text leaves the host
tools only under a key `untrusted` of the object it belongs to (the server's instructions tell the
host what that means), without escape sequences or control characters, each string bounded.
"""

from __future__ import annotations

from typing import Any

# the keys whose values are worker-written or quote worker text, wherever they appear in a result
WORKER_KEYS = frozenset({"summary", "evidence", "data", "reason", "activity", "text", "now", "hints"})
MAX_CHARS = 2000



def clean(text: str, limit: int = MAX_CHARS) -> str:
    """`text` without escape sequences or control characters (newlines and tabs kept), at most
    `limit` characters and a note of how many were cut."""
    from pilothouse.providers.untrusted import inert

    text = inert(text)
    if len(text) > limit:
        text = f"{text[:limit]} … [{len(text) - limit} more characters cut]"
    return text


def _clean_all(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k), 200): _clean_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_all(v) for v in value]
    return value


def fence(value: Any) -> Any:
    """`value` (a tool's result) with each WORKER_KEYS entry moved under `untrusted` in its own
    object, and every string in it cleaned (names and codes too: they can come from a worker's plan)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        held: dict[str, Any] = {}
        for k, v in value.items():
            if k in WORKER_KEYS:
                if v not in (None, "", [], {}):
                    held[k] = _clean_all(v)
            else:
                out[k] = fence(v)
        if held:
            out["untrusted"] = held
        return out
    if isinstance(value, (list, tuple)):
        return [fence(v) for v in value]
    if isinstance(value, str):
        return clean(value)
    return value
