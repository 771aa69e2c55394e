"""The verdict a run earns (core/dispatch/verdict.py), rule by rule, from real events and outcomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.core.dispatch.process import ProcOutcome
from pilothouse.core.dispatch.verdict import RunState, Work, cost_from_tokens, decide, final_text
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


def test_run_state_adds_up_a_runs_events():
    state = RunState()
    for ev in (c.SessionEvent("s-1"), c.TextEvent("one"), c.ReasoningEvent("hmm"),
               c.ToolEvent("read", "started"), c.ToolEvent("read", "ok"), c.ToolEvent("write", "denied"),
               c.ToolEvent("bash", "error"), c.ToolEvent("bash", "denied"),
               c.UsageEvent(input=10, output=5, reasoning=2, cache_read=3, cache_write=1, cost=0.25),
               c.UsageEvent(input=1, output=1, cost=0.5), c.UsageEvent(), c.TextEvent("two"),
               c.ErrorEvent("slow down", "transient"),
               c.QuotaEvent(window="five_hour", used_pct=97.5, resets_at="2026-11-29T12:00:00Z")):
        state.add(ev)
    assert state.texts == ["one", "two"]
    assert state.tokens == {"input": 11, "output": 6, "reasoning": 2, "cache_read": 3, "cache_write": 1}
    assert (state.cost, state.steps, state.denied, state.tool_other) == (0.75, 3, 2, 1)
    assert state.session_id == "s-1"
    assert state.errors == [("transient", "slow down")]
    assert state.quota == [{"window": "five_hour", "used_pct": 97.5, "resets_at": "2026-11-29T12:00:00Z"}]


def test_the_stderr_tail_keeps_the_last_4000_bytes():
    state = RunState()
    state.add_stderr(b"a" * 3000)
    state.add_stderr(b"b" * 3000)
    assert state.stderr_tail == b"a" * 1000 + b"b" * 3000


def test_final_text_joins_the_text_events_unless_the_runner_has_its_own():
    from pilothouse.providers.runners import get_runner

    runner = get_runner("builtin")
    state = RunState()
    assert final_text(state, runner) is None
    state.add(c.TextEvent("\nfirst\n"))
    state.add(c.TextEvent("second\n"))
    assert final_text(state, runner) == "first\n\nsecond"


@pytest.mark.parametrize("outcome, why", [
    (ProcOutcome(pid=1, exit_code=-2, interrupted=True, timed_out=True),
     "interrupted: the worker was stopped on request"),
    (ProcOutcome(pid=1, exit_code=-9, timed_out=True, idle_timed_out=True),
     "timed out: the run exceeded its overall timeout"),
    (ProcOutcome(pid=1, exit_code=-9, idle_timed_out=True),
     "idle timeout: the worker produced no output for too long"),
])
def test_why_a_run_ended_is_named_first_flag_wins(outcome, why):
    d = decide(RunState(), outcome, "code", "some text", 0)
    assert (d["verdict"], d["error"]) == ("partial", why)
    d = decide(RunState(), outcome, "code", None, 0)
    assert (d["verdict"], d["error"]) == ("error", why)


def test_an_aborted_silent_run_names_the_reason():
    d = decide(RunState(), ProcOutcome(pid=1, exit_code=1, aborted_reason="step cap: stopped after 4 steps"),
               "code", None, 0)
    assert (d["verdict"], d["error"]) == ("error", "step cap: stopped after 4 steps")


def test_a_step_capped_run_with_text_is_partial_and_says_so():
    state = RunState()
    for _ in range(4):
        state.add(c.UsageEvent(input=1))
    d = decide(state, ok(), "code", "still working", 4)
    assert (d["verdict"], d["error"]) == ("partial", "step cap: the worker used all 4 steps without finishing")
    # a parsed result is never step capped, and no cap (0) never caps
    assert decide(state, ok(), "code", code("complete"), 4)["error"] is None
    assert decide(state, ok(), "code", "still working", 0)["error"] is None
    assert decide(state, ok(), "code", "still working", 5)["error"] is None


def test_a_malformed_result_is_partial_with_the_parse_error():
    d = decide(RunState(), ok(), "code", result({"status": "complete"}), 0)
    assert (d["verdict"], d["parse_state"], d["result"]) == ("partial", "malformed", None)
    assert d["parse_error"] == "field 'validation': Field required"


VERDICT = {
    "run_id": "r1", "resume_of": None, "provider": "sim", "runner": "builtin", "mode": "code",
    "verdict": "partial", "exit_code": 0, "timed_out": True, "idle_timed_out": False, "interrupted": True,
    "steps": 3, "step_cap": 50, "duration_s": 1.25,
    "tokens": {"input": 100, "output": 20, "reasoning": 8, "cache_read": 0, "cache_write": 0},
    "cost_usd": 0.0, "usage": "measured", "tool_errors": {"permission_denied": 2, "other": 0}, "parse_state": "unstructured",
    "parse_error": None, "result": None, "final_text_path": "/x/r1.report.md", "session_id": "s",
    "stderr_tail": "", "error_class": None, "error": None, "quota": [], "reason": "no result block",
}


def test_the_verdict_line_is_the_contracts_and_a_bad_field_raises():
    from pilothouse.core.dispatch.verdict import verdict_line
    from pilothouse.providers.contract import Verdict

    line = verdict_line(VERDICT)
    assert line == Verdict.model_validate(VERDICT).line()
    assert json.loads(line) == {"type": "pilothouse.verdict", "schema": 1, **VERDICT}
    with pytest.raises(ValueError, match="error_class"):
        verdict_line({**VERDICT, "error_class": "pwned"})


def test_the_started_line_is_compact_json_in_order():
    from pilothouse.core.dispatch.verdict import started_line

    assert started_line({"run_id": "r1", "mode": "code"}) == \
        '{"type":"pilothouse.started","schema":1,"run_id":"r1","mode":"code"}'


def test_the_human_summary_names_what_went_wrong():
    from pilothouse.core.dispatch.verdict import human_summary

    assert human_summary(VERDICT) == "partial (unstructured), 3 steps, 1.2s, 128 tokens, timed out, interrupted, 2 denied"
    calm = {**VERDICT, "timed_out": False, "interrupted": False, "tool_errors": {"permission_denied": 0, "other": 1}}
    assert human_summary(calm) == "partial (unstructured), 3 steps, 1.2s, 128 tokens"


def test_a_quota_error_class_read_from_json_is_quota():
    # a runner's error class parsed from its JSON stream is an equal string, not the same object
    state = RunState()
    state.add(c.ErrorEvent("rate limited", json.loads('"quota"')))
    assert decide(state, ok(), "code", "partial words", 0)["verdict"] == "quota"


def test_a_run_past_its_step_cap_is_capped_and_no_cap_below_one():
    state = RunState()
    for _ in range(5):
        state.add(c.UsageEvent(input=1))
    d = decide(state, ProcOutcome(pid=1, exit_code=-15, aborted_reason="step cap: stopped after 4 steps"),
               "code", "went on", 4)
    assert d["error"] == "step cap: the worker used all 4 steps without finishing"
    assert decide(state, ok(), "code", "went on", -1)["error"] is None


def test_cost_from_tokens_prices_only_what_has_a_price():
    from pilothouse.providers.registry import Cost

    tokens = {"input": 1_000_000, "output": 1_000_000, "reasoning": 0, "cache_read": 0, "cache_write": 0}
    assert cost_from_tokens(tokens, Cost(output=2.0)) == 2.0
    assert cost_from_tokens(tokens, Cost(input=2.0)) == 2.0
    assert cost_from_tokens({**tokens, "cache_write": 1_000_000}, Cost(input=1.0)) == 2.0
    assert cost_from_tokens(dict.fromkeys(tokens, 0), Cost(input=5.0, output=5.0)) == 0.0
    assert cost_from_tokens({**tokens, "output": 1}, Cost(output=1.0)) == 0.000001


def test_events_with_strings_parsed_at_run_time_add_up_the_same():
    # runners build kinds and statuses from their JSON streams: equal strings, not the same objects
    def parsed(word: str) -> str:
        return json.loads(json.dumps(word))

    state = RunState()
    for ev in (c.TextEvent("hi", kind=parsed("text")), c.UsageEvent(input=2, kind=parsed("usage")),
               c.ToolEvent("w", parsed("denied"), kind=parsed("tool")), c.ToolEvent("b", parsed("error")),
               c.SessionEvent("s-9", kind=parsed("session")), c.ErrorEvent("x", "fatal", kind=parsed("error")),
               c.QuotaEvent("weekly", kind=parsed("quota"))):
        state.add(ev)
    assert (state.texts, state.tokens["input"], state.steps, state.denied, state.tool_other) == (["hi"], 2, 1, 1, 1)
    assert (state.session_id, state.errors) == ("s-9", [("fatal", "x")])
    assert state.quota == [{"window": "weekly", "used_pct": None, "resets_at": None}]


def test_the_last_error_decides():
    state = RunState()
    state.add(c.ErrorEvent("first", "transient"))
    state.add(c.ErrorEvent("denied the key", "auth"))
    d = decide(state, ok(), "code", None, 0)
    assert (d["verdict"], d["error_class"], d["error"]) == ("error", "auth", "denied the key")


@pytest.mark.parametrize("outcome", [ProcOutcome(pid=1, exit_code=-11), ProcOutcome(pid=1, exit_code=0, timed_out=True),
                                     ProcOutcome(pid=1, exit_code=0, idle_timed_out=True),
                                     ProcOutcome(pid=1, exit_code=0, interrupted=True)])
def test_a_silent_run_that_did_not_end_cleanly_is_an_error_not_empty(outcome):
    assert decide(RunState(), outcome, "code", None, 0)["verdict"] == "error"


def test_a_long_run_at_its_step_cap_is_capped():
    state = RunState()
    for _ in range(300):
        state.add(c.UsageEvent(input=1))
    assert decide(state, ok(), "code", "went on", 300)["error"] == \
        "step cap: the worker used all 300 steps without finishing"


def test_a_malformed_result_at_the_step_cap_is_capped_and_a_cap_of_one_caps():
    state = RunState()
    state.add(c.UsageEvent(input=1))
    d = decide(state, ok(), "code", result({"status": "complete"}), 1)
    assert (d["verdict"], d["parse_state"]) == ("partial", "malformed")
    assert d["error"] == "step cap: the worker used all 1 steps without finishing"


def test_cost_is_rounded_to_a_millionth_of_a_dollar():
    from pilothouse.providers.registry import Cost

    one = {"input": 0, "output": 1, "reasoning": 0, "cache_read": 0, "cache_write": 0}
    assert cost_from_tokens(one, Cost(output=1.6)) == 0.000002


def _opencode_step(tokens: dict) -> str:
    return json.dumps({"type": "step_finish", "sessionID": "ses_1", "part": {
        "id": "prt_1", "reason": "stop", "messageID": "msg_1", "sessionID": "ses_1", "type": "step-finish",
        "tokens": tokens, "cost": 0}})


def test_a_turn_a_runner_reports_as_zero_tokens_is_unknown_not_measured():
    from pilothouse.providers.runners import get_runner

    runner = get_runner("opencode")  # OpenCode passes on a server's missing usage as zeros
    state = RunState()
    state.add(c.TextEvent("done"))
    for ev in runner.parse_line(_opencode_step({"total": 0, "input": 0, "output": 0, "reasoning": 0,
                                                "cache": {"write": 0, "read": 0}})):
        state.add(ev)
    assert state.steps == 1 and state.usage == "unknown"
    counted = RunState()
    for ev in runner.parse_line(_opencode_step({"total": 45, "input": 40, "output": 5, "reasoning": 0,
                                                "cache": {"write": 0, "read": 0}})):
        counted.add(ev)
    assert counted.usage == "measured"


@pytest.mark.parametrize("events, label", [
    ([], "measured"),  # the model was never reached: nothing answered, nothing counted
    ([c.TextEvent("hi")], "unknown"),  # it answered, and nobody counted
    ([c.TextEvent("hi"), c.UsageEvent(input=3, output=1)], "measured"),
    ([c.UsageEvent(input=3, output=1), c.UsageEvent(input=9, output=2, source="estimated")], "estimated"),
    ([c.UsageEvent(input=9, output=2, source="estimated"), c.UsageEvent(source="unknown")], "unknown"),
])
def test_a_runs_usage_label_is_its_least_trustworthy_turn(events, label):
    state = RunState()
    for ev in events:
        state.add(ev)
    assert state.usage == label


@pytest.mark.parametrize("tokens, usage, shown", [
    ({"input": 10, "output": 5, "reasoning": 1, "cache_read": 0, "cache_write": 0}, "measured", "16 tokens"),
    ({"input": 10, "output": 5, "reasoning": 1, "cache_read": 0, "cache_write": 0}, "estimated",
     "~16 tokens (estimated)"),
    (None, "unknown", "? tokens"),
])
def test_the_summary_line_says_how_tokens_were_counted(tokens, usage, shown):
    from pilothouse.core.dispatch.verdict import human_summary

    line = human_summary({**VERDICT, "tokens": tokens, "usage": usage})
    assert line == f"partial (unstructured), 3 steps, 1.2s, {shown}, timed out, interrupted, 2 denied"


# --- every verdict that is not `completed` says why: runs on the real sim -------------------

def _sim_verdict(cli, repo, tmp_path, mode: str, turns: str, text: str = "Do the task.\n") -> dict:
    scenario = tmp_path / "why.yaml"
    scenario.write_text(f"name: why\ndescription: a model that does not follow the protocol\nscripts:\n"
                        f"  - turns:\n{turns}")
    (tmp_path / "task.md").write_text(text)
    r = cli("dispatch", "--provider", "sim", "--mode", mode, "--workdir", str(repo), "--task-file",
            str(tmp_path / "task.md"), "--scenario", str(scenario))
    out = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert r.returncode == 0 and len(out) == 2, r.stdout + r.stderr
    return out[1]


def test_an_answer_without_a_result_block_says_so(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "explore",
                     "      - say: Reading.\n        actions:\n          - read: {path: src/calc.py}\n"
                     "      - say: add() adds two numbers.\n")
    assert (v["verdict"], v["parse_state"]) == ("partial", "unstructured")
    assert v["reason"].startswith("no result block: the answer does not end with <!--RESULT-->")


def test_a_code_run_without_any_tool_call_says_the_server_likely_dropped_the_tools(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "code",
                     "      - say: 'def slugify(text): return text.lower()  # put this in src/slug.py'\n")
    # no tool call, no change: nothing was done, and the likely cause is named
    assert (v["verdict"], v["parse_state"]) == ("empty", "unstructured")
    assert v["reason"].startswith("no tool calls although the task needed them: the server likely dropped")
    assert "pilothouse providers check" in v["reason"]


def test_a_refusal_is_named(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "explore", "      - say: \"I'm sorry, but I can't help with that.\"\n")
    assert v["verdict"] == "empty"  # it read nothing and reported nothing: no partial work
    assert v["reason"] == "refusal: the model declined the task (\"I'm sorry, but I can't help with that.\")"


def test_an_answer_cut_at_the_output_cap_says_so(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "explore",
                     "      - say: 'src/calc.py defines add(a, b), which returns a'\n        finish: length\n")
    assert v["verdict"] == "partial"
    assert v["reason"].startswith("cut off at the output cap (finish_reason length)")
    events = [json.loads(x) for x in Path(v["final_text_path"]).with_suffix("").with_suffix(".jsonl")
              .read_text().splitlines()]
    assert {"kind": "limit", "reason": "output_cap"} in [{k: e[k] for k in ("kind", "reason")}
                                                         for e in events if e["kind"] == "limit"]


def test_an_empty_answer_and_an_endpoint_error_say_so(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "explore", "      - say: ''\n")
    assert (v["verdict"], v["reason"]) == ("empty", "empty answer: the model returned no text")
    v = _sim_verdict(cli, git_repo, tmp_path, "explore",
                     "      - error: {status: 500, message: 'model crashed'}\n")
    assert v["verdict"] == "error" and v["reason"].startswith("endpoint or worker error: ")
    assert "500" in v["reason"]


def test_a_completed_verdict_has_no_reason(cli, git_repo, tmp_path):
    v = _sim_verdict(cli, git_repo, tmp_path, "explore",
                     "      - say: |\n          <!--RESULT-->{\"facts\":[{\"fact\":\"adds\",\"file_line\":\"src/calc.py:2\"}]}"
                     "<!--/RESULT-->\n")
    assert (v["verdict"], v["reason"]) == ("completed", None)


def test_a_code_run_cut_short_with_no_change_stays_partial_and_says_why():
    d = decide(RunState(), ProcOutcome(pid=1, exit_code=0, timed_out=True), "code", "half an answer", 0,
               Work(changed=[]))
    assert (d["verdict"], d["reason"]) == ("partial", "timed out: the run exceeded its overall timeout")
    d = decide(RunState(), ok(), "code", "half an answer", 0, Work(changed=[]))
    assert d["verdict"] == "empty"
