"""The automatic-retry rules: what is retried, what waits, what stops at once."""

from __future__ import annotations

from pilothouse.core.stops import rules as stops


def v(**kw):
    base = {"run_id": "r1", "provider": "sim", "verdict": "completed", "parse_state": "parsed",
            "result": {"status": "complete", "validation": {"passed": True}}}
    base.update(kw)
    return base


def test_quota_waits_without_using_an_attempt():
    d = stops.after_builder(v(verdict="quota", error_class="quota", quota=[{"window": "five_hour"}]), {"crash": 0},
                            commit=None, last_submitted=None)
    assert d.action == stops.WAIT and d.counters == {"crash": 0} and "five_hour" in d.reason


def test_auth_is_a_problem_at_once():
    d = stops.after_builder(v(verdict="error", error_class="auth", error="401"), {}, commit=None, last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "auth")


def test_crash_is_retried_once_then_stops():
    d = stops.after_builder(v(verdict="error", error="killed"), {}, commit=None, last_submitted=None)
    assert d.action == stops.RERUN and d.counters["crash"] == 1
    d = stops.after_builder(v(verdict="error", error="killed"), d.counters, commit=None, last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "worker_crashed")


def test_a_run_the_operator_aborted_stops_instead_of_rerunning():
    aborted = v(verdict="error", interrupted=True, error="interrupted: the worker was stopped on request")
    d = stops.after_builder(aborted, {}, commit=None, last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "operator_aborted") and "aborted by the operator" in d.reason


def test_a_builder_that_changed_nothing_is_not_a_crash():
    d = stops.after_builder(v(), {}, commit=None, last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "no_changes") and "without changing any file" in d.reason


def test_builder_setup_failure_and_file_requests_stop_at_once():
    d = stops.after_builder(v(result={"status": "blocked", "blocked_reason": "npm: command not found"}), {},
                            commit="abc", last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "builder_blocked") and "npm" in d.reason
    d = stops.after_builder(v(result={"status": "complete", "needs_files": ["src/other.py"]}), {},
                            commit="abc", last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "needs_files")


def test_unchanged_resubmission_stops():
    d = stops.after_builder(v(), {}, commit="abc1234567", last_submitted="abc1234567")
    assert (d.action, d.kind) == (stops.STOP, "unchanged_resubmission")
    assert stops.after_builder(v(), {}, commit="def", last_submitted="abc").action == stops.PROCEED


def test_gate_failure_retried_once_then_problem_and_setup_never_retried():
    gate = {"passed": False, "level": "fast", "command": "pytest", "exit_code": 1, "output_tail": "E assert"}
    d = stops.after_gate(gate, {})
    assert d.action == stops.RESUME and "E assert" in (d.feedback or "")
    d = stops.after_gate(gate, d.counters)
    assert (d.action, d.kind) == (stops.STOP, "gate_failed") and d.evidence["output_tail"] == "E assert"
    d = stops.after_gate({**gate, "command": "npm ci"}, {}, setup=True)
    assert (d.action, d.kind) == (stops.STOP, "setup_failed")
    assert stops.after_gate({"passed": True}, {"gate_fail": 1}).counters["gate_fail"] == 0


def test_a_gate_whose_program_is_not_installed_stops_without_the_builder():
    """The builder cannot install the operator's tools: no rerun, no tokens, the problem says what to fix."""
    gate = {"passed": False, "level": "fast", "command": "nosuch --flag", "exit_code": None, "output_tail": "",
            "not_installed": True,
            "reason": "gate 'fast': command not found: nosuch — install it or fix gates.fast in .ai/project.yaml"}
    d = stops.after_gate(gate, {})
    assert (d.action, d.kind, d.counters) == (stops.STOP, "gate_failed", {})
    assert d.reason.startswith("The gate cannot run: gate 'fast': command not found: nosuch")


def test_review_findings_go_back_three_times_then_problem():
    rv = v(result={"overall": "CHANGES", "findings": [{"severity": "major", "file_line": "a.py:1",
                                                        "summary": "off by one", "suggested_fix": "use <="}]})
    for rnd in (1, 2):
        d = stops.after_review(rv, {}, review_round=rnd)
        assert d.action == stops.RESUME and "off by one" in (d.feedback or "")
    d = stops.after_review(rv, {}, review_round=3)
    assert (d.action, d.kind) == (stops.STOP, "review_rejected")
    assert stops.after_review(v(result={"overall": "PASS"}), {}, review_round=1).action == stops.PROCEED


def test_a_reviewer_that_could_not_review_stops_at_once():
    d = stops.after_review(v(parse_state="unstructured", result=None), {}, review_round=1)
    assert (d.action, d.kind) == (stops.STOP, "reviewer_failed")


def test_each_ending_of_a_run_is_classified():
    assert stops.classify_verdict(v()) == "ok"
    assert stops.classify_verdict(v(verdict="partial")) == "ok"
    assert stops.classify_verdict(v(verdict="quota")) == "quota"
    assert stops.classify_verdict(v(verdict="error", error_class="quota")) == "quota"
    assert stops.classify_verdict(v(verdict="error", error_class="auth")) == "auth"
    assert stops.classify_verdict(v(verdict="error", error_class="fatal")) == "crash"
    assert stops.classify_verdict(v(verdict="empty", parse_state="unavailable", result=None)) == "crash"
    assert stops.classify_verdict(v(verdict="partial", timed_out=True)) == "crash"
    assert stops.classify_verdict(v(verdict="partial", idle_timed_out=True)) == "crash"


def test_an_empty_run_is_a_crash_retried_once():
    empty = v(verdict="empty", parse_state="unavailable", result=None)
    d = stops.after_builder(empty, {}, commit=None, last_submitted=None)
    assert (d.action, d.counters) == (stops.RERUN, {"crash": 1})
    d = stops.after_builder(empty, d.counters, commit=None, last_submitted=None)
    assert (d.action, d.kind) == (stops.STOP, "worker_crashed")
