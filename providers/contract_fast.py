"""The contract's result blocks and verdict line, checked without importing pydantic.

pydantic costs a dispatch ~0.1 s of CPU to import and build the contract's models: half its
whole budget. Nearly every run's result block and verdict are plainly valid — exact JSON types,
no unknown keys, nothing to coerce — and for such data the pydantic models (contract.py) answer
exactly the input with defaults filled in, in field order. That is what this module computes,
from the field tables below. Anything else — a missing field, a wrong type, a value pydantic
would coerce, an unknown key — gets None here, and the caller asks the pydantic models, which
remain the only judge of invalid data and the only source of error messages.
tests/providers/test_contract_fast.py keeps the tables equal to the models.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REQUIRED = object()
_INT_LIMIT = 2 ** 63

# type specs: "str" "int" "float" "bool" "any" "dict" (dict[str, Any]), ("opt", T), ("list", T),
# ("lit", values), ("model", name). Fields: (name, alias, type, default); a default of [] means
# a fresh empty list (pydantic's default_factory=list).
MODELS: dict[str, tuple[bool, list[tuple[str, str, Any, Any]]]] = {  # name -> (extra forbidden, fields)
    "Tokens": (False, [(n, n, "int", 0) for n in ("input", "output", "reasoning", "cache_read", "cache_write")]),
    "ToolErrors": (False, [("permission_denied", "permission_denied", "int", 0), ("other", "other", "int", 0)]),
    "Verdict": (False, [
        ("type", "type", ("lit", ("pilothouse.verdict",)), "pilothouse.verdict"),
        ("schema_", "schema", "int", 1),
        ("run_id", "run_id", "str", REQUIRED),
        ("resume_of", "resume_of", ("opt", "str"), None),
        ("provider", "provider", "str", REQUIRED),
        ("runner", "runner", "str", REQUIRED),
        ("mode", "mode", "str", REQUIRED),
        ("verdict", "verdict", ("lit", ("completed", "partial", "error", "empty", "quota")), REQUIRED),
        ("exit_code", "exit_code", ("opt", "int"), None),
        ("timed_out", "timed_out", "bool", False),
        ("idle_timed_out", "idle_timed_out", "bool", False),
        ("interrupted", "interrupted", "bool", False),
        ("steps", "steps", "int", 0),
        ("step_cap", "step_cap", "int", 0),
        ("duration_s", "duration_s", "float", 0.0),
        ("tokens", "tokens", ("opt", ("model", "Tokens")), "Tokens"),
        ("cost_usd", "cost_usd", ("opt", "float"), 0.0),
        ("usage", "usage", ("lit", ("measured", "estimated", "unknown")), "measured"),
        ("tool_errors", "tool_errors", ("model", "ToolErrors"), "ToolErrors"),
        ("parse_state", "parse_state", ("lit", ("parsed", "malformed", "unstructured", "unavailable")),
         "unavailable"),
        ("parse_error", "parse_error", ("opt", "str"), None),
        ("result", "result", ("opt", "dict"), None),
        ("final_text_path", "final_text_path", ("opt", "str"), None),
        ("session_id", "session_id", ("opt", "str"), None),
        ("stderr_tail", "stderr_tail", "str", ""),
        ("error_class", "error_class", ("opt", ("lit", ("auth", "quota", "transient", "fatal"))), None),
        ("error", "error", ("opt", "str"), None),
        ("quota", "quota", ("list", "dict"), []),
        ("reason", "reason", ("opt", "str"), None),
    ]),
    "Fact": (True, [("fact", "fact", "str", REQUIRED), ("file_line", "file_line", "str", REQUIRED)]),
    "ExploreResult": (True, [("facts", "facts", ("list", ("model", "Fact")), REQUIRED),
                             ("truncated", "truncated", "bool", False)]),
    "ValidationCommand": (True, [("cmd", "cmd", "str", REQUIRED), ("exit_code", "exit_code", "int", REQUIRED)]),
    "Validation": (True, [("commands", "commands", ("list", ("model", "ValidationCommand")), []),
                          ("passed", "passed", "bool", REQUIRED)]),
    "CodeResult": (True, [
        ("status", "status", ("lit", ("complete", "partial", "blocked")), REQUIRED),
        ("files_changed", "files_changed", ("list", "str"), []),
        ("validation", "validation", ("model", "Validation"), REQUIRED),
        ("risks", "risks", ("list", "str"), []),
        ("needs_files", "needs_files", ("list", "str"), []),
        ("blocked_reason", "blocked_reason", ("opt", "str"), None),
    ]),
    "TestFailure": (True, [("test", "test", "str", REQUIRED), ("error", "error", "str", REQUIRED)]),
    "TestResult": (True, [("command", "command", "str", REQUIRED), ("passed", "passed", "int", REQUIRED),
                          ("failed", "failed", "int", REQUIRED),
                          ("failures", "failures", ("list", ("model", "TestFailure")), [])]),
    "Finding": (True, [
        ("severity", "severity", ("lit", ("critical", "major", "minor", "nit")), REQUIRED),
        ("file_line", "file_line", "str", REQUIRED),
        ("summary", "summary", "str", REQUIRED),
        ("suggested_fix", "suggested_fix", "str", ""),
    ]),
    "ReviewResult": (True, [("overall", "overall", ("lit", ("PASS", "CHANGES", "REJECT")), REQUIRED),
                            ("findings", "findings", ("list", ("model", "Finding")), [])]),
    "PlanResult": (False, [("tasks", "tasks", ("list", "dict"), REQUIRED)]),
}
RESULT_MODELS = {"explore": "ExploreResult", "code": "CodeResult", "resume": "CodeResult",
                 "test": "TestResult", "review": "ReviewResult", "plan": "PlanResult"}
_RESULT_RE = re.compile(r"<!--RESULT-->(.*?)<!--/RESULT-->", re.DOTALL)
# what both parsers say of a result block nested deeper than json can read
NESTED = "result block is nested too deeply to read"


class _NotPlain(Exception):
    """The data needs pydantic's judgement."""


def _str(v: Any) -> str:
    if type(v) is not str:
        raise _NotPlain
    try:
        v.encode("utf-8")  # pydantic refuses lone surrogates (JSON can carry them)
    except UnicodeEncodeError:
        raise _NotPlain from None
    return v


def _check(spec: Any, v: Any, by_alias: bool) -> Any:
    if spec == "str":
        return _str(v)
    if spec == "int":
        if type(v) is not int or not -_INT_LIMIT < v < _INT_LIMIT:
            raise _NotPlain
        return v
    if spec == "float":
        if type(v) is float:
            return v
        if type(v) is int and -_INT_LIMIT < v < _INT_LIMIT:
            return float(v)
        raise _NotPlain
    if spec == "bool":
        if type(v) is not bool:
            raise _NotPlain
        return v
    if spec == "dict":
        if type(v) is not dict or not all(type(k) is str for k in v):
            raise _NotPlain
        return json.loads(json.dumps(v))  # a copy, as pydantic's dump is; JSON-only values
    kind, arg = spec
    if kind == "opt":
        return None if v is None else _check(arg, v, by_alias)
    if kind == "lit":
        if type(v) is not str or v not in arg:
            raise _NotPlain
        return v
    if kind == "list":
        if type(v) is not list:
            raise _NotPlain
        return [_check(arg, item, by_alias) for item in v]
    if kind == "model":
        return _model(arg, v, by_alias)
    raise _NotPlain


def _model(name: str, data: Any, by_alias: bool) -> dict[str, Any]:
    forbid, fields = MODELS[name]
    if type(data) is not dict:
        raise _NotPlain
    known = {alias for _, alias, _, _ in fields}
    if any(k not in known for k in data):
        raise _NotPlain  # unknown (or name-instead-of-alias) keys: pydantic decides
    out: dict[str, Any] = {}
    for fname, alias, spec, default in fields:
        key = alias if by_alias else fname
        if alias in data:
            out[key] = _check(spec, data[alias], by_alias)
        elif default is REQUIRED:
            raise _NotPlain
        elif isinstance(default, list):
            out[key] = []
        elif isinstance(spec, tuple) and spec[0] in ("model", "opt") and default in MODELS:
            out[key] = _model(default, {}, by_alias)  # a nested model's defaults, from its own table
        else:
            out[key] = default
    return out


def verdict_line(fields: dict[str, Any]) -> str | None:
    """contract.Verdict.model_validate(fields).line() for plainly valid fields, else None."""
    try:
        return json.dumps(_model("Verdict", fields, by_alias=True), separators=(",", ":"))
    except (_NotPlain, ValueError, TypeError, RecursionError):
        return None


def parse_result(text: str | None, mode: str) -> tuple[str, dict[str, Any] | None, str | None] | None:
    """(state, result, error) as contract.parse_result gives them, or None when pydantic must judge."""
    if text is None:
        return "unavailable", None, None
    blocks = _RESULT_RE.findall(text)
    if not blocks:
        return "unstructured", None, None
    raw = blocks[-1].strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return "malformed", None, f"result block is not JSON: {exc.msg} at char {exc.pos}"
    except RecursionError:  # a hostile worker's block nested past the parser's depth
        return "malformed", None, NESTED
    name = RESULT_MODELS.get("code" if mode == "resume" else mode)
    if name is None:
        return "parsed", data if isinstance(data, dict) else {"value": data}, None
    try:
        return "parsed", _model(name, data, by_alias=False), None
    except (_NotPlain, ValueError, TypeError, RecursionError):
        return None
