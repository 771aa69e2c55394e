"""Automatic retries first; what they can't fix becomes a problem (the supervisor's stop rules).

Pure decisions over a run's verdict, a gate result or a review, with the task's retry
counters (tasks.counters JSON): the supervisor asks, then does what the Decision says and
records its reason as an event, so `pilothouse why` can explain every wait, retry and stop.

- review findings go back to the same builder up to MAX_REVIEW_ROUNDS times;
- a failed gate, or a crashed worker, is retried once;
- at once, with no builder re-run: a reviewer that could not review, a builder reporting a tool
  or setup failure (or asking for files outside its scope), a resubmission with no change, an
  auth error;
- a usage limit is never a failure: the task waits, no attempt used, no problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_REVIEW_ROUNDS = 3
MAX_GATE_RETRIES = 1
MAX_CRASH_RETRIES = 1

# Decision.action values
PROCEED = "proceed"    # go on to the next step (gate, review, merge)
RESUME = "resume"      # the same builder continues its session with `feedback`
RERUN = "rerun"        # run the same step again (a crashed worker: a fresh run of that step)
WAIT = "wait"          # usage limit: task waits, no attempt used; resumes by itself
STOP = "stop"          # a problem for the operator (kind, reason, evidence)


@dataclass
class Decision:
    action: str
    reason: str
    kind: str | None = None                     # problem kind when action == STOP
    feedback: str | None = None                 # what the builder is told when action == RESUME
    counters: dict[str, Any] = field(default_factory=dict)   # the task's counters after this decision
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "kind": self.kind, "counters": self.counters,
                "evidence": self.evidence}


def _bump(counters: dict[str, Any], key: str) -> dict[str, Any]:
    out = dict(counters)
    out[key] = int(out.get(key, 0)) + 1
    return out


def _tail(text: str | None, n: int = 1500) -> str:
    return (text or "")[-n:]


def classify_verdict(verdict: dict[str, Any]) -> str:
    """ok | quota | auth | crash — how a run ended, before looking at what it said."""
    if verdict.get("verdict") == "quota" or verdict.get("error_class") == "quota":
        return "quota"
    if verdict.get("error_class") == "auth":
        return "auth"
    if verdict.get("timed_out") or verdict.get("idle_timed_out"):
        return "crash"
    if verdict.get("verdict") == "empty" and verdict.get("parse_state") != "unavailable" \
            and verdict.get("error_class") is None:
        # it answered, but did nothing the answer claims (dispatch checked the work): not a crash
        # for a fresh run to cure; the builder's step says what is missing
        return "ok"
    if verdict.get("verdict") in ("error", "empty"):
        return "crash"
    return "ok"


def _evidence(verdict: dict[str, Any], log: str | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"run": verdict.get("run_id"), "verdict": verdict.get("verdict")}
    if log:
        ev["log"] = log
    if verdict.get("error"):
        ev["error"] = verdict["error"]
    if verdict.get("stderr_tail"):
        ev["stderr_tail"] = _tail(verdict["stderr_tail"], 800)
    return ev


def _common(verdict: dict[str, Any], counters: dict[str, Any], role: str, log: str | None) -> Decision | None:
    cls = classify_verdict(verdict)
    provider = verdict.get("provider") or "the provider"
    if cls == "quota":
        windows = ", ".join(str(q.get("window")) for q in verdict.get("quota") or []) or "a usage window"
        return Decision(WAIT, f"{provider} is at a usage limit ({windows}): the {role} waits; no attempt used",
                        counters=counters)
    if cls == "auth":
        return Decision(STOP, f"{provider} refused the credentials ({verdict.get('error') or 'auth error'}); "
                              f"fix the key (pilothouse keys set {provider}), then retry",
                        kind="auth", counters=counters, evidence=_evidence(verdict, log))
    if cls == "crash" and verdict.get("interrupted"):
        # the operator aborted it (`x`, abort_run): a rerun would undo that within a second
        return Decision(STOP, f"The {role} was aborted by the operator; retry runs it again.",
                        kind="operator_aborted", counters=counters, evidence=_evidence(verdict, log))
    if cls == "crash":
        if int(counters.get("crash", 0)) < MAX_CRASH_RETRIES:
            return Decision(RERUN, f"the {role} run ended without a result ({verdict.get('error') or verdict.get('verdict')}); "
                                   "retrying it once", counters=_bump(counters, "crash"))
        if role == "reviewer":
            return Decision(STOP, f"The reviewer could not review twice ({verdict.get('error') or verdict.get('verdict')}).",
                            kind="reviewer_failed", counters=counters, evidence=_evidence(verdict, log))
        return Decision(STOP, f"The {role} crashed twice ({verdict.get('error') or verdict.get('verdict')}); "
                              "it was retried once already.", kind="worker_crashed", counters=counters,
                        evidence=_evidence(verdict, log))
    return None


def after_builder(verdict: dict[str, Any], counters: dict[str, Any], *, commit: str | None,
                  last_submitted: str | None, log: str | None = None, base: str | None = None) -> Decision:
    """A builder (code/resume) run finished. `commit`: the worktree's head now; `last_submitted`:
    the commit it had handed over before this run (None on the first run); `base`: the commit the
    task's branch started from."""
    if base is not None and commit == base:
        # the branch never left its base: a resubmission of the base is no work at all, and
        # `accept` would take the untouched base through the gate and the merge
        commit = None
    common = _common(verdict, counters, "builder", log)
    if common is not None:
        return common
    counters = {**counters, "crash": 0}
    result = verdict.get("result") or {}
    ev = _evidence(verdict, log)
    if result.get("needs_files"):
        ev["needs_files"] = result["needs_files"]
        return Decision(STOP, f"The builder asks for files outside its scope: {', '.join(result['needs_files'])}.",
                        kind="needs_files", counters=counters, evidence=ev)
    if result.get("status") == "blocked":
        why = result.get("blocked_reason") or "no reason given"
        ev["blocked_reason"] = why
        return Decision(STOP, f"The builder reports a tool or setup failure: {why}", kind="builder_blocked",
                        counters=counters, evidence=ev)
    if last_submitted is not None and commit == last_submitted:
        return Decision(STOP, f"The builder resubmitted commit {str(commit)[:10]} unchanged since the last "
                              "round; re-running it would spend tokens for the same answer.",
                        kind="unchanged_resubmission", counters=counters, evidence=ev)
    if commit is None:
        said = f" ({verdict['reason']})" if verdict.get("reason") else ""
        return Decision(STOP, f"The builder finished without changing any file{said}: nothing to gate or merge.",
                        kind="no_changes", counters=counters, evidence=ev)
    return Decision(PROCEED, f"builder submitted {commit[:10]}", counters=counters)


def after_gate(gate: dict[str, Any], counters: dict[str, Any], *, setup: bool = False,
               base_fails: str | None = None) -> Decision:
    """A task's gate (or its worktree setup, `setup=True`) finished. gate: GateResult.to_dict();
    `base_fails`: the base commit, when the same gate fails the same way there."""
    if gate.get("passed"):
        return Decision(PROCEED, f"gate {gate.get('level', '')} passed", counters={**counters, "gate_fail": 0})
    ev = {"command": gate.get("command"), "exit_code": gate.get("exit_code"),
          "output_tail": _tail(gate.get("output_tail")), "level": gate.get("level")}
    if gate.get("changed_files"):
        ev["changed_files"] = gate["changed_files"]
    why = gate.get("reason") or f"exit {gate.get('exit_code')}"
    if gate.get("not_installed") and not setup:
        # no builder can fix a program missing from this machine: no builder tokens on it
        return Decision(STOP, f"The gate cannot run: {why}. Then retry.", kind="gate_failed",
                        counters=counters, evidence=ev)
    if base_fails and not setup:
        # the repository's own tests fail before the task: no builder round can fix that, and a
        # builder that leaves them alone would only resubmit the same commit
        ev["base"] = base_fails
        return Decision(STOP, f"The repository's own tests fail before the task: gate {gate.get('level', '')} "
                              f"`{gate.get('command')}` fails the same way on the base commit {base_fails} ({why}). "
                              "Fix them on the base branch (or change the gate in .ai/project.yaml), then retry.",
                        kind="gate_failed", counters=counters, evidence=ev)
    if setup:
        # a setup failure fails alike on every run: no builder tokens on it
        return Decision(STOP, f"Setup `{gate.get('command')}` failed in the task's worktree ({why}).",
                        kind="setup_failed", counters=counters, evidence=ev)
    if int(counters.get("gate_fail", 0)) < MAX_GATE_RETRIES:
        feedback = (f"The gate `{gate.get('command')}` failed ({why}). Fix the cause, commit, and report again. "
                    f"Output (tail):\n{_tail(gate.get('output_tail'), 3000)}")
        return Decision(RESUME, f"gate {gate.get('level', '')} failed ({why}); the builder gets one retry",
                        feedback=feedback, counters=_bump(counters, "gate_fail"))
    return Decision(STOP, f"Gate {gate.get('level', '')} `{gate.get('command')}` failed again after the builder's "
                          f"retry ({why}).", kind="gate_failed", counters=counters, evidence=ev)


def after_review(verdict: dict[str, Any], counters: dict[str, Any], *, review_round: int,
                 log: str | None = None) -> Decision:
    """A reviewer run finished; review_round is the round just reviewed (1-based)."""
    cls = classify_verdict(verdict)
    if cls in ("quota", "auth"):
        return _common(verdict, counters, "reviewer", log)  # type: ignore[return-value]
    result = verdict.get("result") or {}
    overall = result.get("overall")
    if cls == "crash" or verdict.get("parse_state") != "parsed" or overall not in ("PASS", "CHANGES", "REJECT"):
        # a reviewer that could not review stops the task at once: re-running builders won't help
        why = verdict.get("parse_error") or verdict.get("error") or f"parse {verdict.get('parse_state')}"
        return Decision(STOP, f"The reviewer could not review ({why}).", kind="reviewer_failed",
                        counters=counters, evidence=_evidence(verdict, log))
    if overall == "PASS":
        return Decision(PROCEED, f"review round {review_round}: PASS", counters=counters)
    findings = result.get("findings") or []
    lines = [f"- [{f.get('severity')}] {f.get('file_line')}: {f.get('summary')}"
             + (f" (fix: {f['suggested_fix']})" if f.get("suggested_fix") else "") for f in findings]
    if review_round < MAX_REVIEW_ROUNDS:
        feedback = (f"Review round {review_round} says {overall}. Address these findings, commit, and report "
                    "again:\n" + ("\n".join(lines) or "(no findings listed)"))
        return Decision(RESUME, f"review round {review_round}: {overall} with {len(findings)} findings; "
                                f"back to the builder ({review_round}/{MAX_REVIEW_ROUNDS})",
                        feedback=feedback, counters=counters)
    ev = _evidence(verdict, log)
    ev["findings"] = lines
    return Decision(STOP, f"The reviewer said {overall} {review_round} times; the last findings: "
                          + ("; ".join(f.get("summary", "") for f in findings[:3]) or "(none listed)"),
                    kind="review_rejected", counters=counters, evidence=ev)
