"""The real Claude Code CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-claude`."""

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

PROVIDER, RUNNER = "sim-claude", "claude-code"


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
    assert ("Write", "ok") in tools and ("Edit", "ok") in tools and ("Bash", "ok") in tools
    assert_tokens_match(run)
    again = drv.dispatch("resume", git_repo, "cli-code", "Add type hints.", resume_of=v["run_id"])
    assert again.verdict["verdict"] == "completed", again.verdict
    assert again.verdict["session_id"] == v["session_id"]
    assert (git_repo / "src" / "slug.py").read_text().startswith("def slugify(text: str) -> str:")
    assert_tokens_match(again)
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


# --- the parser on lines recorded from the real binary (no binary needed) ---------------------

def _runner():
    from pilothouse.providers.runners.claude_code import ClaudeCodeRunner

    return ClaudeCodeRunner()


def test_parse_recorded_code_run():
    s = summarize(replay(_runner(), "claude-code.jsonl"))
    assert len(s["sessions"]) == 1 and s["errors"] == []
    assert [t for t in s["tools"] if t[1] != "started"] == [("Write", "ok"), ("Read", "ok"), ("Edit", "ok"),
                                                           ("Bash", "ok")]
    # one usage event per model turn; their sum is the result line's total
    assert s["steps"] == 5 and s["tokens"]["input"] == 6767 and s["tokens"]["output"] == 193
    assert s["cost"] == pytest.approx(0.03866)


def test_parse_recorded_refusals_in_read_only_run():
    s = summarize(replay(_runner(), "claude-readonly.jsonl"))
    assert [t for t in s["tools"] if t[1] != "started"] == [("Bash", "denied"), ("Bash", "denied")]


def test_parse_recorded_auth_and_quota_failures():
    assert summarize(replay(_runner(), "claude-auth.jsonl"))["errors"] == ["auth"]
    s = summarize(replay(_runner(), "claude-quota.jsonl"))
    assert s["errors"] == ["quota"] and s["quota"] == ["five_hour"]


def test_rate_limit_event_becomes_a_quota_event():
    ev = _runner().parse_line('{"type":"rate_limit_event","rate_limit_info":{"status":"rejected",'
                              '"resetsAt":1795950000,"rateLimitType":"seven_day","utilization":0.97}}')[0]
    assert (ev.kind, ev.window, ev.resets_at) == ("quota", "seven_day", "2026-11-29T11:00:00Z")
    assert ev.used_pct == pytest.approx(97.0)


def test_auth_retry_notice_is_an_auth_error():
    evs = _runner().parse_line('{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,'
                               '"error_status":401,"error":"authentication_failed"}')
    assert [(e.kind, e.error_class) for e in evs] == [("error", "auth")]


def test_unknown_and_broken_lines_yield_nothing():
    r = _runner()
    for line in ("", "not json", "[1,2]", '{"type":"assistant","message":null}', '{"type":"mystery"}'):
        assert r.parse_line(line) == []
