"""The real OpenCode CLI (pinned) against the sim, through `pilothouse dispatch --provider sim-opencode`."""

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

PROVIDER, RUNNER = "sim-opencode", "opencode"


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
    assert ("write", "ok") in tools and ("edit", "ok") in tools and ("bash", "ok") in tools
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
@pytest.mark.parametrize("mode", ["explore"])  # review gets the same permissions (test_explore_config…)
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
