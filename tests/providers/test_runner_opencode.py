"""The real OpenCode CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-opencode`."""

from __future__ import annotations

from test_runner_common import RealCliSuite, replay, summarize


class TestRealCli(RealCliSuite):
    provider, runner = "sim-opencode", "opencode"
    code_tools = (("write", "ok"), ("edit", "ok"), ("bash", "ok"))
    read_only_modes = ("explore",)  # review gets the same permissions (test_explore_config…)


# --- the parser on lines recorded from the real binary (no binary needed) ---------------------

def _runner():
    from pilothouse.providers.runners.opencode import OpenCodeRunner

    return OpenCodeRunner()


def test_parse_recorded_code_run():
    s = summarize(replay(_runner(), "opencode-code.jsonl"))
    assert len(s["sessions"]) == 1 and s["errors"] == []
    assert s["tools"] == [("write", "ok"), ("read", "ok"), ("edit", "ok"), ("bash", "ok")]
    # tokens come per step (step_finish) and are summed
    assert s["steps"] == 5 and s["tokens"]["input"] == 25642 and s["tokens"]["output"] == 182


def test_parse_recorded_refusals_in_read_only_run():
    # explore denies edits, so opencode does not even offer write/edit; the shell fallback is refused
    s = summarize(replay(_runner(), "opencode-readonly.jsonl"))
    assert s["tools"] == [("bash", "denied"), ("bash", "denied")]


def test_parse_recorded_auth_and_quota_failures():
    assert summarize(replay(_runner(), "opencode-auth.jsonl"))["errors"] == ["auth"]
    # the retry our plugin reports (opencode itself prints nothing while it backs off)
    s = summarize(replay(_runner(), "opencode-quota.jsonl"))
    assert s["errors"] == ["quota"] and s["quota"] == ["five_hour"]


def test_a_transient_retry_is_not_a_quota_stop():
    evs = _runner().parse_line('{"type":"pilothouse.retry","sessionID":"ses_1","attempt":1,'
                               '"message":"Provider is overloaded","next":1}')
    assert [e.kind for e in evs] == ["session"]


def test_explore_config_denies_edits_and_writing_shell():
    from pilothouse.providers.runners.opencode import permissions

    p = permissions("explore")
    assert p["edit"] == "deny" and p["bash"]["*"] == "deny" and p["bash"]["git diff*"] == "allow"
    assert permissions("review") == p == permissions("plan")
    assert permissions("code")["edit"] == "allow"


def test_unknown_and_broken_lines_yield_nothing():
    r = _runner()
    for line in ("", "not json", "[1,2]", '{"type":"tool_use","part":null}', '{"type":"mystery"}'):
        assert r.parse_line(line) == []
