"""The real Codex CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-codex`."""

from __future__ import annotations

import pytest
from test_runner_common import (
    Driver,
    assert_auth_fails_fast,
    assert_canary_not_in_launch,
    assert_no_canary,
    assert_tokens_match,
    replay,
    summarize,
)

PROVIDER, RUNNER = "sim-codex", "codex"


@pytest.fixture
def drv(cli):
    return Driver(cli, PROVIDER, RUNNER)


@pytest.mark.realcli
def test_code_creates_and_edits_then_resume_continues(drv, git_repo):
    run = drv.dispatch("code", git_repo, "cli-code", "Add a slugify helper in src/slug.py.")
    v = run.verdict
    assert v["verdict"] == "completed", v
    assert (git_repo / "src" / "slug.py").read_text() == 'def slugify(text):\n    return text.lower().replace(" ", "-")\n'
    tools = {(e["name"], e["status"]) for e in drv.events(run) if e["kind"] == "tool"}
    assert ("apply_patch", "ok") in tools and ("exec_command", "ok") in tools
    assert_tokens_match(run)
    again = drv.dispatch("resume", git_repo, "cli-code", "Add type hints.", resume_of=v["run_id"])
    assert again.verdict["verdict"] == "completed", again.verdict
    assert again.verdict["session_id"] == v["session_id"]
    assert (git_repo / "src" / "slug.py").read_text().startswith("def slugify(text: str) -> str:")
    assert_tokens_match(again)  # per-turn deltas, though Codex reports thread totals
    assert_no_canary(drv, run, again)
    assert_canary_not_in_launch(drv, "code", git_repo)


@pytest.mark.realcli
def test_explore_parses_the_result_block(drv, git_repo):
    run = drv.dispatch("explore", git_repo, "cli-explore", "How does add work?")
    assert run.verdict["verdict"] == "completed"
    assert run.verdict["parse_state"] == "parsed"
    assert run.verdict["result"]["facts"][0]["file_line"] == "src/calc.py:2"
    assert_tokens_match(run)


@pytest.mark.realcli
@pytest.mark.parametrize("mode", ["explore", "review"])
def test_read_only_modes_cannot_write(drv, git_repo, mode):
    run = drv.dispatch(mode, git_repo, "cli-readonly", "Write NOTE.md.")
    assert not (git_repo / "NOTE.md").exists()
    assert not (git_repo / "SHELL_NOTE.md").exists()
    assert run.verdict["tool_errors"]["permission_denied"] == 2, run.verdict
    assert_tokens_match(run)


@pytest.mark.realcli
def test_bad_key_fails_fast_as_auth(drv, git_repo):
    run = drv.dispatch("explore", git_repo, "auth-401", "Hello.")
    assert_auth_fails_fast(drv, run)


@pytest.mark.realcli
def test_rate_limit_ends_as_quota_with_its_window(drv, git_repo):
    run = drv.dispatch("explore", git_repo, "quota-429", "Hello.")
    assert run.verdict["verdict"] == "quota"
    assert run.verdict["quota"][0]["window"] == "five_hour"
    assert run.verdict["quota"][0]["used_pct"] == 100.0
    assert run.verdict["quota"][0]["resets_at"]


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
