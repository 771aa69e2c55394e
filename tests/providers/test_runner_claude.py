"""The real Claude Code CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-claude`."""

from __future__ import annotations

import pytest
from test_runner_common import RealCliSuite, replay, summarize


class TestRealCli(RealCliSuite):
    provider, runner = "sim-claude", "claude-code"
    code_tools = (("Write", "ok"), ("Edit", "ok"), ("Bash", "ok"))


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
