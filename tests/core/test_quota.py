"""Quota windows with an injected clock: hours of windows in milliseconds, no sleeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventTailer, utc_now_iso
from pilothouse.core.stops import quota

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)


@pytest.fixture
def layout(tmp_path: Path) -> RepoLayout:
    return RepoLayout(tmp_path)


def changed(lay: RepoLayout) -> list[dict]:
    return [e for e in EventTailer(lay.events).read_new() if e["type"] == "quota.changed"]


def test_unknown_provider_is_available(layout: RepoLayout) -> None:
    av = quota.availability(layout, "sim", T0)
    assert av.available and av.next_check_at is None
    assert quota.windows(layout) == [] and not layout.state_db.exists()  # asking creates no store


def test_429_with_reset_waits_until_reset_then_allows_exactly_one_check(layout: RepoLayout) -> None:
    limited = quota.record_verdict(layout, "sim", {
        "verdict": "quota", "error_class": "quota",
        "quota": [{"window": "five_hour", "used_pct": 100, "resets_at": "2026-11-29T09:00:00Z"}]}, T0)
    assert limited
    av = quota.availability(layout, "sim", T0 + H)
    assert not av.available and not av.check_due and av.next_check_at == T0 + 2 * H
    assert "five_hour" in av.reason and "resets" in av.reason
    assert quota.availability(layout, "other", T0 + H).available  # other providers keep running
    # the reset time passed: still not available — a reset permits a check, it proves nothing
    av = quota.availability(layout, "sim", T0 + 2 * H + M)
    assert not av.available and av.check_due
    assert quota.claim_check(layout, "sim", T0 + 2 * H + M, poll_s=300)
    assert not quota.claim_check(layout, "sim", T0 + 2 * H + M, poll_s=300)  # coalesced
    assert not quota.availability(layout, "sim", T0 + 2 * H + 2 * M).check_due
    quota.record_ok(layout, "sim", "check", T0 + 2 * H + 2 * M)
    assert quota.availability(layout, "sim", T0 + 2 * H + 2 * M).available
    evs = changed(layout)
    assert [e["data"].get("blocked") for e in evs] == [True, False]
    assert evs[0]["data"]["source"] == "http-429" and evs[0]["data"]["resets_at"] == "2026-11-29T09:00:00.000Z"


def test_no_reset_time_backs_off_30_then_60_capped(layout: RepoLayout) -> None:
    quota.record_verdict(layout, "p", {"verdict": "quota", "error_class": "quota", "quota": []}, T0)
    av = quota.availability(layout, "p", T0)
    assert not av.available and av.next_check_at == T0 + 30 * M and "no reset time" in av.reason
    at = T0 + 30 * M
    assert quota.claim_check(layout, "p", at)
    quota.check_failed(layout, "p", at)
    assert quota.availability(layout, "p", at).next_check_at == at + 60 * M
    at = at + 60 * M
    assert quota.claim_check(layout, "p", at)
    quota.check_failed(layout, "p", at)
    assert quota.availability(layout, "p", at).next_check_at == at + 60 * M  # capped
    ev = changed(layout)[-1]["data"]
    assert ev["resets_at"] is None and ev["backoff_s"] == 3600 and "no reset time" in ev["reason"]


def test_weekly_block_stands_when_five_hour_resets(layout: RepoLayout) -> None:
    quota.record_quota(layout, "claude", "five_hour", 100, T0 + 2 * H, "rate_limit_event", T0)
    quota.record_quota(layout, "claude", "weekly", 100, T0 + 72 * H, "rate_limit_event", T0)
    av = quota.availability(layout, "claude", T0 + 3 * H)
    assert not av.available and not av.check_due and av.next_check_at == T0 + 72 * H
    assert "weekly" in av.reason
    assert not quota.claim_check(layout, "claude", T0 + 3 * H)
    assert quota.availability(layout, "claude", T0 + 73 * H).check_due


def test_a_later_429_during_the_check_sets_a_new_wait(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + M, "http-429", T0)
    assert quota.claim_check(layout, "sim", T0 + 2 * M)
    quota.record_verdict(layout, "sim", {"verdict": "quota", "error_class": "quota",
                                         "quota": [{"window": "five_hour", "retry_after_s": 600}]}, T0 + 3 * M)
    av = quota.availability(layout, "sim", T0 + 4 * M)
    assert not av.available and av.next_check_at == T0 + 13 * M


def test_usage_below_full_is_recorded_not_blocking(layout: RepoLayout) -> None:
    quota.record_verdict(layout, "codex", {"verdict": "completed", "quota": [
        {"window": "five_hour", "used_pct": 42.0, "resets_at": "2026-11-29T10:00:00Z"}]}, T0)
    assert quota.availability(layout, "codex", T0).available
    w = quota.windows(layout, "codex")[0]
    assert w["used_pct"] == 42.0 and w["source"] == "run" and not w["blocked"]


def test_may_launch_hands_the_due_check_to_one_launcher(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + M, "http-429", T0)
    assert not quota.may_launch(layout, "sim", T0).available
    first = quota.may_launch(layout, "sim", T0 + 2 * M, poll_s=60)
    assert first.available and "checks" in first.reason
    assert not quota.may_launch(layout, "sim", T0 + 2 * M, poll_s=60).available
    # the check's run answered: everyone may go
    quota.record_verdict(layout, "sim", {"verdict": "completed"}, T0 + 3 * M)
    assert quota.may_launch(layout, "sim", T0 + 3 * M).available


def test_a_run_started_before_the_block_does_not_lift_it(layout: RepoLayout) -> None:
    from pilothouse.core.state import store

    conn = store.connect(layout.state_db)
    for rid, start in (("early", T0), ("late", T0 + 10 * M)):
        conn.execute("INSERT INTO runs(run_id, role, provider, mode, state, started_at) VALUES (?, 'builder',"
                     " 'sim', 'code', 'finished', ?)", (rid, utc_now_iso(start)))
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + 8 * M, "http-429", T0 + M, conn=conn)
    quota.record_verdict(layout, "sim", {"verdict": "completed"}, T0 + 2 * M, conn=conn, run="early")
    assert not quota.availability(layout, "sim", T0 + 2 * M, conn=conn).available
    quota.record_verdict(layout, "sim", {"verdict": "completed"}, T0 + 11 * M, conn=conn, run="late")
    assert quota.availability(layout, "sim", T0 + 11 * M, conn=conn).available
    conn.close()


def test_providers_check_and_status_through_the_cli(git_repo: Path, cli) -> None:
    import json

    out = cli("providers", "check", "sim", "--json", cwd=git_repo, env={"PILOTHOUSE_SIM_SCENARIO": "quota-429"})
    assert out.returncode == 1, out.stderr
    res = json.loads(out.stdout)[0]
    assert res["outcome"] == "usage limit" and not res["availability"]["available"]
    st = json.loads(cli("providers", "status", "--json", cwd=git_repo).stdout)
    w = st["sim"]["windows"][0]
    assert w["window"] == "five_hour" and w["blocked"] and w["resets_at"] and w["source"] == "http-429"
    out = cli("providers", "check", "sim", cwd=git_repo, env={"PILOTHOUSE_SIM_SCENARIO": "explore-basic"})
    assert out.returncode == 0 and "sim: available" in out.stdout, out.stdout + out.stderr
    assert json.loads(cli("providers", "status", "sim", "--json", cwd=git_repo).stdout)["sim"]["available"]


@pytest.mark.parametrize(("ahead", "reads"), [
    (timedelta(milliseconds=500), "2026-11-29T07:00:00.500Z (passed)"),  # under a second: nothing to wait for
    (timedelta(seconds=119), "2026-11-29T07:01:59.000Z (in 119 s)"),
    (timedelta(seconds=120), "2026-11-29T07:02:00.000Z (in 2 min)"),
    (timedelta(seconds=7199), "2026-11-29T08:59:59.000Z (in 119 min)"),
    (timedelta(seconds=7200), "2026-11-29T09:00:00.000Z (in 2.0 h)"),
    (timedelta(hours=73, minutes=30), "2026-12-02T08:30:00.000Z (in 73.5 h)"),
])
def test_the_wait_reads_in_seconds_minutes_or_hours(layout: RepoLayout, ahead: timedelta, reads: str) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + ahead, "rate_limit_event", T0)
    av = quota.availability(layout, "sim", T0)
    assert av.reason == f"sim five_hour limit reached; resets {reads}, then a check"
    assert av.as_dict() == {"available": False, "reason": av.reason, "check_due": False,
                            "next_check_at": utc_now_iso(T0 + ahead)}


def test_the_backoff_reason_names_the_next_check_and_its_length(layout: RepoLayout) -> None:
    quota.record_verdict(layout, "p", {"verdict": "quota"}, T0)
    av = quota.availability(layout, "p", T0)
    assert av.reason == ("p unknown limit reached with no reset time; "
                         "next check 2026-11-29T07:30:00.000Z (in 30 min) (backoff 30 min)")
    ev = changed(layout)[-1]["data"]
    assert ev["reason"] == "p unknown limit hit with no reset time given: next check in 30 min (backoff)"
    assert ev["window"] == "unknown" and ev["source"] == "http-429" and ev["used_pct"] is None
    assert quota.availability(layout, "q", T0).as_dict() == {
        "available": True, "reason": "q: no usage limit recorded", "check_due": False, "next_check_at": None}


def test_a_check_is_due_at_the_exact_reset_time(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + H, "rate_limit_event", T0)
    quota.record_quota(layout, "sim", "weekly", 100, T0 + H, "rate_limit_event", T0)
    av = quota.availability(layout, "sim", T0 + H)
    assert av == quota.Availability(
        False, "sim five_hour, weekly: reset time passed; waiting for a check to confirm", T0 + H, check_due=True)
    assert not quota.claim_check(layout, "sim", T0 + H - timedelta(milliseconds=1))
    assert quota.claim_check(layout, "sim", T0 + H, poll_s=60)
    assert [w["next_check_at"] for w in quota.windows(layout, "sim")] == [utc_now_iso(T0 + H + M)] * 2
    assert quota.claim_check(layout, "sim", T0 + H + M)  # by default, the next check five minutes on
    assert [w["next_check_at"] for w in quota.windows(layout, "sim")] == [utc_now_iso(T0 + H + 6 * M)] * 2


def test_blocked_means_full_or_a_429(layout: RepoLayout) -> None:
    quota.record_quota(layout, "a", "five_hour", 99.9, T0 + H, "run", T0)
    quota.record_quota(layout, "b", "five_hour", 100.0, T0 + H, "run", T0)
    quota.record_quota(layout, "c", "five_hour", None, T0 + H, "http-429", T0)
    quota.record_quota(layout, "d", "five_hour", None, None, "run", T0)
    later = utc_now_iso(T0 + H)
    assert [(w["provider"], w["blocked"], w["next_check_at"]) for w in quota.windows(layout)] == [
        ("a", 0, None), ("b", 1, later), ("c", 1, later), ("d", 0, None)]  # a usable window awaits no check
    reasons = [e["data"]["reason"] for e in changed(layout)]
    assert reasons == ["a five_hour at 99.9% — usable",
                       "b five_hour limit hit; a check may run after 2026-11-29T08:00:00.000Z",
                       "c five_hour limit hit; a check may run after 2026-11-29T08:00:00.000Z",
                       "d five_hour at ?% — usable"]


def test_a_reset_already_past_when_blocked_allows_a_check_now_not_before(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 - H, "http-429", T0)
    assert quota.windows(layout, "sim")[0]["next_check_at"] == utc_now_iso(T0)
    assert quota.availability(layout, "sim", T0).check_due


def test_only_a_move_of_the_blocked_state_or_reset_is_evented(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 40, T0 + H, "run", T0)
    quota.record_quota(layout, "sim", "five_hour", 50, T0 + H, "run", T0 + M)  # same state and reset
    assert len(changed(layout)) == 1
    quota.record_quota(layout, "sim", "five_hour", 50, T0 + 2 * H, "run", T0 + 2 * M)  # the reset moved
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + 2 * H, "run", T0 + 3 * M)  # now blocked
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + 2 * H, "run", T0 + 4 * M)  # nothing moved
    assert [(e["data"]["resets_at"], e["data"]["blocked"]) for e in changed(layout)] == [
        ("2026-11-29T08:00:00.000Z", False), ("2026-11-29T09:00:00.000Z", False), ("2026-11-29T09:00:00.000Z", True)]
    w = quota.windows(layout, "sim")[0]
    assert (w["used_pct"], w["observed_at"], w["backoff_s"]) == (100.0, utc_now_iso(T0 + 4 * M), 0)


def test_a_retry_after_sets_the_reset_and_an_answer_lifts_only_blocked_windows(layout: RepoLayout) -> None:
    quota.record_verdict(layout, "sim", {"verdict": "partial", "quota": [
        {"window": "weekly", "used_pct": 30, "source": "headers"}]}, T0)
    assert changed(layout)[0]["data"]["source"] == "headers"  # the run's answer then stamps it "run"
    quota.record_verdict(layout, "sim", {"verdict": "failed", "error_class": "quota",
                                         "quota": [{"retry_after_s": 90}]}, T0 + M)
    w = {r["window"]: r for r in quota.windows(layout, "sim")}
    assert w["unknown"]["resets_at"] == utc_now_iso(T0 + M + timedelta(seconds=90)) and w["unknown"]["blocked"]
    assert w["weekly"]["used_pct"] == 30 and not w["weekly"]["blocked"]
    quota.record_ok(layout, "sim", "probe", T0 + 5 * M)
    w = {r["window"]: r for r in quota.windows(layout, "sim")}
    assert w["unknown"]["used_pct"] is None and not w["unknown"]["blocked"] and w["unknown"]["source"] == "probe"
    assert w["weekly"]["used_pct"] == 30  # a window that was not blocked keeps its figure
    lifted = changed(layout)[-1]["data"]
    assert lifted["windows"] == ["unknown"] and lifted["reason"] == "sim answered a request (probe): available again"
    before = len(changed(layout))
    quota.record_ok(layout, "sim", "probe", T0 + 6 * M)  # nothing blocked: nothing to tell
    assert len(changed(layout)) == before


def test_a_usage_limit_verdict_read_from_its_line_stops_the_run(layout: RepoLayout) -> None:
    """Verdicts reach record_verdict parsed from their JSON line (fresh strings, not this module's)."""
    import json

    line = '{"verdict": "quota", "error_class": null, "quota": []}'
    assert quota.record_verdict(layout, "sim", json.loads(line), T0)
    assert not quota.availability(layout, "sim", T0).available


def test_the_second_backoff_reads_sixty_minutes(layout: RepoLayout) -> None:
    quota.record_verdict(layout, "p", {"verdict": "quota"}, T0)
    quota.check_failed(layout, "p", T0 + 30 * M)
    assert changed(layout)[-1]["data"]["reason"] == (
        "p unknown limit hit with no reset time given: next check in 60 min (backoff)")
    assert quota.availability(layout, "p", T0 + 30 * M).reason == (
        "p unknown limit reached with no reset time; next check 2026-11-29T08:30:00.000Z (in 60 min) (backoff 60 min)")


def test_a_run_that_failed_otherwise_does_not_lift_a_block(layout: RepoLayout) -> None:
    quota.record_quota(layout, "sim", "five_hour", 100, T0 + H, "http-429", T0)
    for kind in ("error", "empty"):
        assert not quota.record_verdict(layout, "sim", {"verdict": kind, "error_class": "transient"}, T0 + M)
    assert not quota.availability(layout, "sim", T0 + M).available
