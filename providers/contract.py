"""The dispatch contract shared by runners, dispatch and the supervisor (docs/contracts.md).

Runners emit the normalised events (plain dataclasses in contract_events.py: a run emits many,
and reading them must not need pydantic). The verdict line and the per-mode result blocks are
pydantic models (contract_fast.py checks the plainly valid ones without importing pydantic).
The started line has no model: it is printed before the worker runs, from fields dispatch
itself sets, so core/dispatch/verdict.py builds it by hand rather than wait for pydantic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pilothouse.providers.contract_fast import NESTED
from pydantic import BaseModel, ConfigDict, Field, ValidationError

VerdictKind = Literal["completed", "partial", "error", "empty", "quota"]
ParseState = Literal["parsed", "malformed", "unstructured", "unavailable"]
ErrorClass = Literal["auth", "quota", "transient", "fatal"]


# --- verdict -------------------------------------------------------------------------------

class Tokens(BaseModel):
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0


class ToolErrors(BaseModel):
    permission_denied: int = 0
    other: int = 0


class Verdict(BaseModel):
    type: Literal["pilothouse.verdict"] = "pilothouse.verdict"
    schema_: int = Field(1, alias="schema")
    run_id: str
    resume_of: str | None = None
    provider: str
    runner: str
    mode: str
    verdict: VerdictKind
    exit_code: int | None = None
    timed_out: bool = False
    idle_timed_out: bool = False
    interrupted: bool = False
    steps: int = 0
    step_cap: int = 0
    duration_s: float = 0.0
    # None: nobody counted them (usage `unknown`), never a 0 that reads as measured
    tokens: Tokens | None = Field(default_factory=Tokens)
    cost_usd: float | None = 0.0
    usage: Literal["measured", "estimated", "unknown"] = "measured"  # providers/usage.py
    tool_errors: ToolErrors = Field(default_factory=ToolErrors)
    parse_state: ParseState = "unavailable"
    parse_error: str | None = None
    result: dict[str, Any] | None = None
    final_text_path: str | None = None
    session_id: str | None = None
    stderr_tail: str = ""
    # not in the two-line contract's required set, but useful to every reader
    error_class: ErrorClass | None = None
    error: str | None = None
    quota: list[dict[str, Any]] = Field(default_factory=list)
    # why the verdict is not `completed`, in one line the operator can act on (None when it is)
    reason: str | None = None

    model_config = ConfigDict(populate_by_name=True)

    def line(self) -> str:
        return json.dumps(self.model_dump(by_alias=True), separators=(",", ":"))


# --- result blocks --------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fact(_Strict):
    fact: str
    file_line: str


class ExploreResult(_Strict):
    facts: list[Fact]
    truncated: bool = False


class ValidationCommand(_Strict):
    cmd: str
    exit_code: int


class Validation(_Strict):
    commands: list[ValidationCommand] = Field(default_factory=list)
    passed: bool


class CodeResult(_Strict):
    status: Literal["complete", "partial", "blocked"]
    files_changed: list[str] = Field(default_factory=list)
    validation: Validation
    risks: list[str] = Field(default_factory=list)
    # a builder that needs files outside its scope says so here (answered by `dismiss`)
    needs_files: list[str] = Field(default_factory=list)
    blocked_reason: str | None = None


class TestFailure(_Strict):
    test: str
    error: str


class TestResult(_Strict):
    __test__ = False  # not a pytest class
    command: str
    passed: int
    failed: int
    failures: list[TestFailure] = Field(default_factory=list)


class Finding(_Strict):
    severity: Literal["critical", "major", "minor", "nit"]
    file_line: str
    summary: str
    suggested_fix: str = ""


class ReviewResult(_Strict):
    overall: Literal["PASS", "CHANGES", "REJECT"]
    findings: list[Finding] = Field(default_factory=list)


class PlanResult(BaseModel):
    # entries are validated by core's task-graph rules (unknown keys, cycles, …), not here
    tasks: list[dict[str, Any]]


RESULT_MODELS: dict[str, type[BaseModel]] = {
    "explore": ExploreResult,
    "code": CodeResult,
    "resume": CodeResult,
    "test": TestResult,
    "review": ReviewResult,
    "plan": PlanResult,
}

_RESULT_RE = re.compile(r"<!--RESULT-->(.*?)<!--/RESULT-->", re.DOTALL)


@dataclass
class ParsedResult:
    state: ParseState
    result: dict[str, Any] | None = None
    error: str | None = None


def parse_result(text: str | None, mode: str) -> ParsedResult:
    """Find the last result block in a worker's answer and validate it against the mode's schema."""
    if text is None:
        return ParsedResult("unavailable")
    blocks = _RESULT_RE.findall(text)
    if not blocks:
        return ParsedResult("unstructured")
    raw = blocks[-1].strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ParsedResult("malformed", error=f"result block is not JSON: {exc.msg} at char {exc.pos}")
    except RecursionError:  # a hostile worker's block nested past the parser's depth
        return ParsedResult("malformed", error=NESTED)
    model = RESULT_MODELS.get("code" if mode == "resume" else mode)
    if model is None:
        return ParsedResult("parsed", result=data if isinstance(data, dict) else {"value": data})
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        return ParsedResult("malformed", error=f"field '{where}': {first['msg']}")
    return ParsedResult("parsed", result=obj.model_dump())
