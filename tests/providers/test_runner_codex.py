"""The real Codex CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-codex`."""

from __future__ import annotations

import json
from typing import Any

from test_runner_common import RealCliSuite, replay, summarize


class TestRealCli(RealCliSuite):
    provider, runner = "sim-codex", "codex"
    code_tools = (("apply_patch", "ok"), ("exec_command", "ok"))

    def check_quota(self, quota: dict[str, Any]) -> None:
        assert quota["used_pct"] == 100.0
        assert quota["resets_at"]


# --- the parser on lines recorded from the real binary (no binary needed) ---------------------

def _runner(read_only: bool = False):
    from pilothouse.providers.runners.codex import CodexRunner

    r = CodexRunner()
    r._read_only = read_only
    return r


def test_parse_recorded_code_run():
    s = summarize(replay(_runner(), "codex-code.jsonl"))
    assert len(s["sessions"]) == 1 and s["errors"] == []
    assert s["tools"].count(("apply_patch", "ok")) == 2 and ("exec_command", "ok") in s["tools"]
    # one step per model request (5 served), the tokens on the turn's last one
    assert s["steps"] == 5 and s["tokens"]["input"] == 9221 and s["tokens"]["output"] == 165
    assert "<!--RESULT-->" in s["texts"][-1]


def test_parse_recorded_refusals_in_read_only_run():
    s = summarize(replay(_runner(read_only=True), "codex-readonly.jsonl"))
    assert ("apply_patch", "denied") in s["tools"] and ("exec_command", "denied") in s["tools"]


def test_parse_recorded_auth_and_quota_failures():
    assert summarize(replay(_runner(), "codex-auth.jsonl"))["errors"] == ["auth"]
    s = summarize(replay(_runner(), "codex-quota.jsonl"))
    assert s["errors"] == ["quota"] and s["quota"] == ["unknown"]  # the window comes from the rollout file


def test_usage_is_reported_as_deltas_of_the_thread_totals():
    r = _runner()
    first = r.parse_line('{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,'
                         '"output_tokens":30,"reasoning_output_tokens":10}}')[0]
    second = r.parse_line('{"type":"turn.completed","usage":{"input_tokens":250,"cached_input_tokens":40,'
                          '"output_tokens":50,"reasoning_output_tokens":10}}')[0]
    assert (first.input, first.cache_read, first.output, first.reasoning) == (60, 40, 20, 10)
    assert (second.input, second.cache_read, second.output, second.reasoning) == (150, 0, 20, 0)


def test_unknown_and_broken_lines_yield_nothing():
    r = _runner()
    for line in ("", "not json", "[1,2]", '{"type":"item.completed","item":null}', '{"type":"mystery"}'):
        assert r.parse_line(line) == []


# --- the sim's Codex dialect: scenario writes/edits become apply_patch hunks -------------------

def test_write_and_edit_become_apply_patch_hunks(tmp_path):
    from pilothouse.providers.sim.dialect import Action, Context
    from pilothouse.providers.sim.dialect_codex import codex_patch
    from pilothouse.providers.sim.request import SimRequest, ToolDecl

    tools = [ToolDecl("exec_command", properties={"cmd": {"type": "string"}}, required=["cmd"]),
             ToolDecl("apply_patch", kind="custom")]
    ctx = Context(request=SimRequest("responses", "m", True, [], tools), cwd=str(tmp_path), call_id="call_1")
    add = codex_patch(Action("write", {"path": "src/a.py", "content": "x = 1\ny = 2\n"}), tools, ctx)
    assert add is not None and add.kind == "custom" and add.name == "apply_patch"
    assert add.arguments == "*** Begin Patch\n*** Add File: src/a.py\n+x = 1\n+y = 2\n*** End Patch\n"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("def f(t):\n    return t.strip()\n")
    edit = codex_patch(Action("edit", {"path": "src/a.py", "old": "t.strip()", "new": "t.lower()"}), tools, ctx)
    assert edit is not None
    assert edit.arguments == ("*** Begin Patch\n*** Update File: src/a.py\n@@\n-    return t.strip()\n"
                              "+    return t.lower()\n*** End Patch\n")
    # an edit the sim cannot widen to whole lines passes to the generic (shell) mapping
    assert codex_patch(Action("edit", {"path": "src/a.py", "old": "absent", "new": "x"}), tools, ctx) is None
    assert codex_patch(Action("bash", {"command": "ls"}), tools, ctx) is None
    assert codex_patch(Action("write", {"path": "b", "content": "x"}), tools[:1], ctx) is None


def test_a_rollout_the_worker_swapped_for_a_link_is_not_followed(tmp_path):
    from pilothouse.providers.runners.codex import rollout_totals

    line = json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": 7, "output_tokens": 3}}}})
    elsewhere = tmp_path / "elsewhere.jsonl"  # stands for a file of the operator's, outside the sandbox
    elsewhere.write_text(line + "\n")
    day = tmp_path / "home" / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    (day / "rollout-x-T1.jsonl").write_text(line + "\n")
    assert rollout_totals(tmp_path / "home", "T1")["input_tokens"] == 7
    (day / "rollout-x-T1.jsonl").unlink()
    (day / "rollout-x-T1.jsonl").symlink_to(elsewhere)
    assert rollout_totals(tmp_path / "home", "T1")["input_tokens"] == 0
