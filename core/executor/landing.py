"""A cluster run's outcome, landed on the supervisor's side as a local run's would be.

Everything in the outcome came from the node, so it is the worker's to forge: the verdict is
rebuilt from the fields a verdict has (types checked, strings redacted, its result block parsed
and judged again, its `files_changed` checked against the work that actually arrived), and only
event lines that are JSON objects reach the run's local log, redacted.
"""

from __future__ import annotations

import json
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.dispatch.runs import Launch

VERDICTS = ("completed", "partial", "empty", "error", "quota")
_TEXT = ("error", "reason", "stderr_tail", "parse_error", "error_class", "session_id", "usage")
_NUMBERS = ("exit_code", "steps", "step_cap")
_FLAGS = ("timed_out", "idle_timed_out", "interrupted")
TEXT_LIMIT = 4000


def vet_verdict(raw: Any, launch: Launch, changed: list[str] | None, redact: Any) -> dict[str, Any] | None:
    """The verdict to record for the run, or None when the node sent none worth the name."""
    if not isinstance(raw, dict) or raw.get("verdict") not in VERDICTS:
        return None
    v: dict[str, Any] = {"type": "pilothouse.verdict", "schema": 1, "run_id": launch.run_id,
                         "provider": launch.provider, "mode": launch.mode, "resume_of": launch.resume_of,
                         "verdict": raw["verdict"], "executor": "ray"}
    for k in _TEXT:
        value = raw.get(k)
        v[k] = redact(str(value))[:TEXT_LIMIT] if isinstance(value, str) else None
    for k in _NUMBERS:
        value = raw.get(k)
        v[k] = value if isinstance(value, int) and not isinstance(value, bool) else None
    for k in _FLAGS:
        v[k] = raw.get(k) is True
    tokens = raw.get("tokens")
    v["tokens"] = ({str(k)[:40]: n for k, n in tokens.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0}
                   if isinstance(tokens, dict) else None)
    cost, duration = raw.get("cost_usd"), raw.get("duration_s")
    v["cost_usd"] = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0 else None
    v["duration_s"] = float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None
    v["quota"] = None  # a node's word on a provider's usage window is not taken (the verdict still says "quota")
    v.update(_judged_result(raw, launch, changed, redact))
    return v


def _judged_result(raw: dict[str, Any], launch: Launch, changed: list[str] | None, redact: Any) -> dict[str, Any]:
    """parse_state, result and what they make of the verdict: the dispatch's own checks, again."""
    from pilothouse.core.dispatch import claims
    from pilothouse.providers.contract import parse_result

    result = raw.get("result")
    if raw.get("parse_state") != "parsed" or not isinstance(result, dict):
        state = raw.get("parse_state") if raw.get("parse_state") in ("unstructured", "unavailable", "malformed") else \
            "malformed"
        out: dict[str, Any] = {"parse_state": state, "result": None}
        if raw["verdict"] == "completed":
            out.update(verdict="partial", reason="the cluster run claims completion without a valid result block")
        return out
    text = f"<!--RESULT-->{redact(json.dumps(result))}<!--/RESULT-->"
    parsed = parse_result(text, "code" if launch.mode == "resume" else launch.mode)
    bad = parsed.error if parsed.state != "parsed" or parsed.result is None else \
        claims.vet_result(parsed.result, launch.mode)
    if bad is not None:
        return {"parse_state": "malformed", "parse_error": str(bad)[:TEXT_LIMIT], "result": None,
                **({"verdict": "partial"} if raw["verdict"] == "completed" else {})}
    out = {"parse_state": "parsed", "result": parsed.result}
    if launch.mode in ("code", "resume") and raw["verdict"] == "completed" and changed is not None:
        found = claims.check_code(parsed.result, changed)
        if found is not None:
            out["verdict"], out["reason"] = found
    return out


def is_event(line: str) -> bool:
    """Whether a line of a node's event log is a JSON object (all a run's log may hold here)."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def write_log(launch: Launch, text: str, redact: Any) -> None:
    """The run's event lines, for the cockpit and the usage counts: JSON objects only, redacted."""
    from pilothouse.providers.fsutil import atomic_write_text

    kept = [redact(line) for line in text.splitlines() if is_event(line)]
    path = runs.provider_logs(launch.provider, launch.run_id)["jsonl"]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(f"{line}\n" for line in kept), mode=0o600, durable=False)


def write_verdict(launch: Launch, verdict: dict[str, Any]) -> None:
    from pilothouse.providers.fsutil import atomic_write_json

    path = runs.provider_logs(launch.provider, launch.run_id)["verdict"]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, verdict, mode=0o600, durable=False)
