"""The verdict a run earns (core/dispatch/verdict.py), rule by rule, from real events and outcomes."""

from __future__ import annotations

import json

import pytest
from pilothouse.core.dispatch.process import ProcOutcome
from pilothouse.core.dispatch.verdict import RunState, cost_from_tokens, decide
from pilothouse.providers import contract_events as c


def result(payload: dict) -> str:
    return f"Done.\n<!--RESULT-->{json.dumps(payload)}<!--/RESULT-->"


def code(status: str) -> str:
    return result({"status": status, "files_changed": [], "validation": {"commands": [], "passed": True}})


def ok() -> ProcOutcome:
    return ProcOutcome(pid=1, exit_code=0)


@pytest.mark.parametrize("mode", ["code", "resume"])
@pytest.mark.parametrize("status, verdict", [("complete", "completed"), ("partial", "partial"),
                                              ("blocked", "partial")])
def test_a_builders_status_decides_completed_or_partial(mode, status, verdict):
    d = decide(RunState(), ok(), mode, code(status), step_cap=0)
    assert (d["verdict"], d["parse_state"], d["result"]["status"]) == (verdict, "parsed", status)
    assert (d["error_class"], d["error"]) == (None, None)


def test_an_explore_result_completes_whatever_it_says():
    text = result({"facts": [{"fact": "adds", "file_line": "src/calc.py:1"}]})
    assert decide(RunState(), ok(), "explore", text, 0)["verdict"] == "completed"


def test_a_clean_silent_run_is_empty_and_an_unclean_one_an_error():
    d = decide(RunState(), ok(), "code", None, 0)
    assert (d["verdict"], d["parse_state"], d["error"]) == ("empty", "unavailable", None)
    d = decide(RunState(), ProcOutcome(pid=1, exit_code=3), "code", None, 0)
    assert (d["verdict"], d["error"]) == ("error", "the worker exited with code 3 and no text")


def test_a_silent_run_that_used_every_step_is_an_error():
    state = RunState()
    for _ in range(3):
        state.add(c.UsageEvent(input=1, output=1))
    d = decide(state, ok(), "code", None, 3)
    assert (d["verdict"], d["error"]) == ("error", "step cap: the worker used all 3 steps without finishing")


def test_quota_wins_over_text_and_a_spawn_failure_over_everything():
    state = RunState()
    state.add(c.ErrorEvent("rate limited", "quota"))
    d = decide(state, ok(), "code", code("complete"), 0)
    assert (d["verdict"], d["error_class"]) == ("quota", "quota")
    d = decide(state, ProcOutcome(spawn_error="no such file: codex"), "code", code("complete"), 0)
    assert (d["verdict"], d["error_class"], d["error"]) == ("error", "fatal", "no such file: codex")


def test_a_quota_window_with_no_text_and_no_error_is_quota():
    state = RunState()
    state.add(c.QuotaEvent(window="five_hour", used_pct=100.0))
    assert decide(state, ok(), "code", None, 0)["verdict"] == "quota"
    assert decide(state, ok(), "code", "some words", 0)["verdict"] == "partial"


def test_an_error_without_a_result_is_an_error_and_text_alone_is_partial():
    state = RunState()
    state.add(c.ErrorEvent("boom", "transient"))
    d = decide(state, ok(), "code", "half an answer", 0)
    assert (d["verdict"], d["error_class"], d["error"]) == ("error", "transient", "boom")
    d = decide(RunState(), ok(), "code", "half an answer", 0)
    assert (d["verdict"], d["parse_state"]) == ("partial", "unstructured")


def test_a_timeout_names_why_the_run_ended_before_the_error():
    state = RunState()
    state.add(c.ErrorEvent("stream closed", "transient"))
    d = decide(state, ProcOutcome(pid=1, exit_code=-9, timed_out=True), "code", None, 0)
    assert d["error"] == "timed out: the run exceeded its overall timeout (then: stream closed)"


def test_cost_from_tokens_uses_per_million_prices():
    from pilothouse.providers.registry import Cost

    tokens = {"input": 1_000_000, "output": 100_000, "reasoning": 100_000, "cache_read": 1_000_000,
              "cache_write": 0}
    assert cost_from_tokens(tokens, Cost(input=3.0, output=15.0)) == 9.0  # cache reads at the input price
    assert cost_from_tokens(tokens, Cost(input=3.0, output=15.0, cache_read=0.3)) == 6.3
    assert cost_from_tokens(tokens, None) == 0.0
