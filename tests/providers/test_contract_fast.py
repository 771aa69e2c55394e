"""contract_fast answers exactly what the pydantic contract answers, or defers to it."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

import pytest
from pilothouse.providers import contract, contract_fast
from pydantic import BaseModel


def _spec(annotation: Any) -> Any:
    """The contract_fast type spec an annotation stands for."""
    simple = {str: "str", int: "int", float: "float", bool: "bool"}
    if annotation in simple:
        return simple[annotation]
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation.__name__)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return ("lit", args)
    if origin is dict and args == (str, Any):
        return "dict"
    if origin is list:
        return ("list", _spec(args[0]))
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return ("opt", _spec(next(a for a in args if a is not type(None))))
    raise AssertionError(f"no spec for {annotation!r}")


@pytest.mark.parametrize("name", sorted(contract_fast.MODELS))
def test_field_tables_match_the_pydantic_models(name: str) -> None:
    model = getattr(contract, name)
    forbid, fields = contract_fast.MODELS[name]
    assert forbid == (model.model_config.get("extra") == "forbid")
    assert [f[0] for f in fields] == list(model.model_fields)
    for fname, alias, spec, default in fields:
        info = model.model_fields[fname]
        assert alias == (info.alias or fname), fname
        assert spec == _spec(info.annotation), fname
        if info.is_required():
            assert default is contract_fast.REQUIRED, fname
        elif info.default_factory is not None:
            made = info.default_factory()  # type: ignore[call-arg]
            if isinstance(made, BaseModel):  # a nested model's defaults: built from its own table
                assert type(made).__name__ == default, fname
                assert spec in (("model", default), ("opt", ("model", default))), fname
            else:
                assert made == [] and default == [], fname
        else:
            assert default == info.default, fname


def _block(obj: Any) -> str:
    return f"Done.\n<!--RESULT-->{json.dumps(obj)}<!--/RESULT-->\n"


PLAIN = [
    ("explore", {"facts": [{"fact": "add sums", "file_line": "src/calc.py:1"}]}),
    ("explore", {"facts": [], "truncated": True}),
    ("code", {"status": "complete", "files_changed": ["a.py"], "validation": {"passed": True,
              "commands": [{"cmd": "pytest", "exit_code": 0}]}}),
    ("resume", {"status": "blocked", "validation": {"passed": False}, "blocked_reason": "needs x",
                "needs_files": ["b.py"]}),
    ("test", {"command": "pytest -q", "passed": 3, "failed": 1,
              "failures": [{"test": "t::x", "error": "boom"}]}),
    ("review", {"overall": "CHANGES", "findings": [{"severity": "minor", "file_line": "a.py:3",
                                                     "summary": "nit"}]}),
    ("plan", {"tasks": [{"id": "a", "depends_on": [], "extra": {"deep": [1, 2.5, None]}}]}),
    ("unknown-mode", {"anything": [1, 2]}),
]
NOT_PLAIN = [
    ("explore", {"facts": [{"fact": "x"}]}),                               # missing field
    ("explore", {"facts": [{"fact": "x", "file_line": "a:1", "more": 1}]}),  # unknown key
    ("explore", {"facts": "none"}),                                        # wrong type
    ("test", {"command": "pytest", "passed": "3", "failed": 0}),           # coercible
    ("test", {"command": "pytest", "passed": 3.0, "failed": 0}),           # coercible
    ("code", {"status": "done", "validation": {"passed": True}}),          # not a literal
    ("code", {"status": "complete", "validation": {"passed": 1}}),         # int for bool
    ("review", {"overall": "PASS", "findings": [{"severity": "nit", "file_line": "\ud800",
                                                  "summary": "s"}]}),      # lone surrogate
    ("plan", {"tasks": [], "note": "extra keys are pydantic's to drop"}),
]


@pytest.mark.parametrize("mode,obj", PLAIN + NOT_PLAIN)
def test_results_equal_pydantic_or_defer(mode: str, obj: Any) -> None:
    text = _block(obj)
    fast = contract_fast.parse_result(text, mode)
    slow = contract.parse_result(text, mode)
    if (mode, obj) in PLAIN:
        assert fast is not None
    else:
        assert fast is None
    if fast is not None:
        assert fast == (slow.state, slow.result, slow.error)
        assert json.dumps(fast[1]) == json.dumps(slow.result)  # same key order too


@pytest.mark.parametrize("text", [None, "no block here", "<!--RESULT-->{nope<!--/RESULT-->",
                                  _block([1]) + _block({"facts": []})])
def test_outside_the_models_answers_as_pydantic(text: str | None) -> None:
    slow = contract.parse_result(text, "explore")
    assert contract_fast.parse_result(text, "explore") == (slow.state, slow.result, slow.error)


def _verdict(**over: Any) -> dict[str, Any]:
    v: dict[str, Any] = {
        "run_id": "r1", "resume_of": None, "provider": "sim", "runner": "builtin", "mode": "explore",
        "verdict": "completed", "exit_code": 0, "timed_out": False, "idle_timed_out": False,
        "interrupted": False, "steps": 2, "step_cap": 40, "duration_s": 0.25,
        "tokens": {"input": 10, "output": 5, "reasoning": 0, "cache_read": 0, "cache_write": 0},
        "cost_usd": 0.0, "tool_errors": {"permission_denied": 0, "other": 0}, "parse_state": "parsed",
        "parse_error": None, "result": {"facts": [], "truncated": False}, "final_text_path": "/x/report.md",
        "session_id": "s", "stderr_tail": "", "error_class": None, "error": None,
        "quota": [{"window": "five_hour", "used_pct": 100.0, "resets_at": None}],
    }
    v.update(over)
    return v


@pytest.mark.parametrize("over", [{}, {"cost_usd": 0, "duration_s": 1}, {"error_class": "quota", "error": "429"},
                                  {"tokens": {}, "tool_errors": {"other": 2}}, {"exit_code": None, "result": None}])
def test_verdict_line_equals_pydantic(over: dict[str, Any]) -> None:
    fields = _verdict(**over)
    assert contract_fast.verdict_line(fields) == contract.Verdict.model_validate(fields).line()


@pytest.mark.parametrize("over", [{"verdict": "fine"}, {"steps": "2"}, {"surprise": 1}, {"schema_": 1},
                                  {"timed_out": 0}, {"result": ["a"]}, {"result": {1: "x"}}])
def test_verdict_not_plain_is_left_to_pydantic(over: dict[str, Any]) -> None:
    assert contract_fast.verdict_line(_verdict(**over)) is None


def test_missing_required_verdict_field_is_left_to_pydantic() -> None:
    fields = _verdict()
    del fields["run_id"]
    assert contract_fast.verdict_line(fields) is None


@pytest.mark.parametrize("mode", ["code", "plan", "unknown-mode"])
def test_a_result_nested_past_the_parsers_depth_is_malformed(mode: str) -> None:
    text = "<!--RESULT-->" + "[" * 100_000 + "]" * 100_000 + "<!--/RESULT-->"
    want = ("malformed", None, "result block is nested too deeply to read")
    assert contract_fast.parse_result(text, mode) == want
    slow = contract.parse_result(text, mode)
    assert (slow.state, slow.result, slow.error) == want


def test_a_verdict_of_only_its_required_fields_gets_the_models_defaults() -> None:
    fields = {"run_id": "r1", "provider": "sim", "runner": "builtin", "mode": "code", "verdict": "empty"}
    line = contract_fast.verdict_line(fields)
    assert line is not None and line == contract.Verdict.model_validate(fields).line()
    assert json.loads(line)["tokens"] == {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0, "cache_write": 0}


@pytest.mark.parametrize("field", ["steps", "duration_s"])
@pytest.mark.parametrize(("value", "answered"), [
    (2 ** 63 - 1, True), (-(2 ** 63) + 1, True),   # 64-bit: answered here, as pydantic answers
    (2 ** 63, False), (-(2 ** 63), False),         # beyond: pydantic's to judge
    (10 ** 400, False), (-(10 ** 400), False),     # no float holds it: pydantic refuses a float field
])
def test_ints_within_64_bits_are_answered_and_larger_ones_left_to_pydantic(field: str, value: int,
                                                                          answered: bool) -> None:
    fields = _verdict(**{field: value})
    line = contract_fast.verdict_line(fields)
    if answered:
        assert line is not None and line == contract.Verdict.model_validate(fields).line()
    else:
        assert line is None
