"""Applying the operator's answers to problems (core.problems records them; the supervisor acts).

Each answer is applied idempotently and then its problem is closed: an answer taken but not yet
closed when the supervisor dies is handed back by `consume_replies` and applied again, and
applying it to a task that has already moved on does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.supervisor.state import TERMINAL, IllegalTransition, counters
from pilothouse.providers.errors import UserError, describe

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor

# where `retry` sends a stopped task back to, by the kind of stop
RETRY_TO = {"gate_failed": "gating", "reviewer_failed": "gating", "merge_conflict": "approved",
            "merge_failed": "approved", "setup_failed": "ready", "model_unfit": "ready", "worktree_failed": "ready",
            "auth": "ready",
            "worker_crashed": "ready", "operator_aborted": "ready", "budget": "ready", "builder_blocked": "ready",
            "no_changes": "ready", "secret_found": "gating", "unchanged_resubmission": "ready",
            "gate_weakened": "gating"}

# stops after the builder finished: what is uncommitted in the worktree then is the operator's
# (after a crash or a usage limit it is the builder's half-done work, which its successor continues)
AFTER_SUBMISSION = ("no_changes", "unchanged_resubmission", "gate_weakened")


def apply_replies(sup: Supervisor) -> None:
    from pilothouse.core.stops import problems

    for rep in problems.consume_replies(sup.layout, conn=sup.conn):
        p = rep.problem
        try:
            outcome = _apply(sup, p, rep)
        except IllegalTransition as exc:
            outcome = f"nothing to do: {exc}"
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be applied must not stall the rest
            if not isinstance(exc, UserError):
                sup.log.exception("problem %s: applying %s failed", p.code, rep.reply)
            why = describe(exc)
            problems.close_problem(sup.layout, p.code, f"not applied: {why}", conn=sup.conn, log=sup.events)
            # the stop still stands: the operator gets it back, with what went wrong, to answer again
            problems.open_problem(sup.layout, p.job, p.task, p.kind,
                                  f"{p.summary.split(' — your ')[0]} — your {rep.reply} could not be applied: {why}",
                                  p.evidence,
                                  list(p.replies), conn=sup.conn, log=sup.events)
            continue
        problems.close_problem(sup.layout, p.code, outcome, conn=sup.conn, log=sup.events)
        sup.log.info("problem %s answered %s: %s", p.code, rep.reply, outcome)


def _apply(sup: Supervisor, p: Any, rep: Any) -> str:
    from pilothouse.core.supervisor.scheduling import resume_builder

    job, reply, words = p.job, rep.reply, rep.words
    if p.task is None:
        return _apply_job(sup, p, reply, words)
    r = sup.store.task(job, p.task)
    if r is None or r["state"] in TERMINAL:
        return "the task is no longer open"
    who = f"{rep.who}: {reply}"
    if reply == "skip":
        for tid in rep.cancels or [p.task]:
            t = sup.store.task(job, tid)
            if t is not None and t["state"] not in TERMINAL and t["state"] not in ("running", "merging"):
                sup.store.set_task(job, tid, "skipped", f"skipped by the operator ({p.code})")
        return "skipped " + ", ".join(rep.cancels or [p.task])
    if reply == "plan":
        _request_replan(sup, job, words)
        sup.store.set_task(job, p.task, "needs_replan", f"the operator asked for a new plan ({p.code})")
        return "re-planning"
    if reply == "accept":
        c = counters(r)
        c["accepted_by_operator"] = True
        if p.kind == "gate_weakened":
            from pilothouse.core.records import jobs

            # an override of a defence: kept with the job's decisions, where the assigner and the
            # operator both see it later
            jobs.decide(sup.layout, job, f"{rep.who} accepted the weakened tests of task {p.task} "
                                         f"(problem {p.code}): {p.summary}")
        if r["state"] == "reviewing":
            sup.store.set_task(job, p.task, "approved", f"accepted by {who}", counters=c)
        else:
            sup.store.set_task(job, p.task, "gating", f"accepted by {who}; its checks run again", counters=c)
        return "accepted"
    if reply in ("hint", "dismiss"):
        text = (f"The operator says: {words}\n" if reply == "hint" else
                "The operator declined the request for more files: finish the task within its scope.\n")
        text += "Continue, then finish with your result block.\n"
        if resume_builder(sup, job, r, text, f"{who}; the builder continues its session"):
            return "builder resumed"
        c = counters(r)
        c["hint"] = words
        sup.store.set_task(job, p.task, "ready", f"{who}; a fresh builder starts (no session to resume)",
                           counters=c)
        return "relaunched"
    if reply == "retry":
        target = RETRY_TO.get(p.kind, "ready")
        c = counters(r)
        c.pop("gate_fail", None)
        c.pop("crash", None)
        fields: dict[str, Any] = {"counters": c}
        if p.evidence.get("step") == "commit" and r["worktree"] and Path(r["worktree"]).is_dir():
            target = "gating"  # the builder's work is there, uncommitted: commit it, not a second builder
            fields["commit_sha"] = _take_operator_fix(sup, p, r, str(p.evidence.get("commit_message") or ""))
        elif r["worktree"] and Path(r["worktree"]).is_dir() and (target in ("gating", "approved")
                                                                 or p.kind in AFTER_SUBMISSION):
            # the same for every stop of a task (docs/own-repo.md): a fix the operator left in the
            # worktree is committed and gated; what merges is what passed
            now = _take_operator_fix(sup, p, r)
            if now != r["commit_sha"]:
                fields["commit_sha"] = now
                target = "gating"
            elif p.kind == "gate_weakened":
                raise UserError(f"nothing changed in {r['worktree']} since the gate measured it: restore the "
                                f"tests there (try it with `pilothouse gate {p.task}`), then retry; or hint")
        elif target in ("gating", "approved"):
            target = "ready"  # its worktree is gone: a builder starts again on the task's branch
        if target == "ready" and r["state"] == "stopped" and p.kind in ("auth", "budget", "worker_crashed",
                                                                               "operator_aborted"):
            fields["session_id"] = r["session_id"]
        sup.store.set_task(job, p.task, target, f"{who} ({p.kind})", **fields)
        if p.kind == "setup_failed":
            return f"back to {target}" + _retry_same_setup_failure(sup, p, who)
        return f"back to {target}"
    return f"reply {reply} does not apply here"


def _retry_same_setup_failure(sup: Supervisor, p: Any, who: str) -> str:
    """The other tasks stopped by the same setup failure were held for the cause the operator just
    fixed: they go back to ready with this one, and their problems close."""
    from pilothouse.core.stops import holds, problems

    moved = []
    for code in holds.same_setup_failure(sup.layout, p.code, conn=sup.conn):
        other = problems.get_problem(sup.layout, code, conn=sup.conn)
        r = sup.store.task(p.job, other.task) if other.task else None
        if r is not None and r["state"] not in TERMINAL:
            c = counters(r)
            c.pop("crash", None)
            sup.store.set_task(p.job, other.task, "ready", f"{who} ({p.code}, the same setup failure)", counters=c)
            moved.append(other.task)
        problems.close_problem(sup.layout, code, f"retried with {p.code}", conn=sup.conn, log=sup.events)
    return f"; with it {', '.join(moved)}" if moved else ""


def _take_operator_fix(sup: Supervisor, p: Any, r: Any, message: str = "") -> str:
    """The operator may have fixed the task's worktree by hand before answering retry: commit what
    they left uncommitted, so the gate judges, and the merge takes, the same tree. Returns the
    worktree's HEAD (a commit of theirs counts as a fix too). `message`: the commit's, when what is
    left is the builder's own work whose commit failed."""
    from pilothouse.core.git.checkout import checkout_state, commit_all

    wt = r["worktree"]
    state = checkout_state(wt)
    if state is None:
        raise UserError(f"{wt} is not a usable checkout: remove it (pilothouse maintain worktrees remove {wt}), "
                        "then retry: a builder starts again on the task's branch")
    head, branch, dirty = state
    if r["branch"] and branch != r["branch"]:
        raise UserError(f"the worktree {wt} is on {branch or 'a detached HEAD'}, not the task's branch "
                        f"{r['branch']}: check it out there (git -C {wt} checkout {r['branch']}), then retry")
    if not dirty:
        return head
    from pilothouse.core.git.records import ScopeViolation, restore_records

    base = counters(r).get("base")
    try:
        # what is in the worktree is still (partly) the builder's: its .ai is put back first
        restore_records(wt, str(base) if base else None)
    except ScopeViolation as exc:
        raise UserError(f"{wt}: {exc}") from None
    sha = commit_all(wt, message or f"Operator's fix for {p.task} (problem {p.code})\n\njob: {p.job}",
                     what="the worktree")
    if sha:
        sup.log.info("committed the operator's changes in %s as %s", wt, sha)
    return sha or head


def _apply_job(sup: Supervisor, p: Any, reply: str, words: str | None) -> str:
    jr = sup.store.job(p.job)
    if jr is None:
        return "no such job"
    planning = jr["state"] == "blocked" and str(jr["reason"] or "").startswith("planning")
    if reply == "plan" or (reply == "retry" and (p.kind == "plan_invalid" or
                                                 (p.kind in ("auth", "worker_crashed", "operator_aborted") and planning))):
        _request_replan(sup, p.job, words)
        return "re-planning"
    if reply == "accept":
        from pilothouse.core.supervisor.review import accept

        accept(sup, p.job)
        return "job accepted by the operator"
    if reply == "retry" and p.kind in ("gate_failed", "reviewer_failed") and jr["state"] == "blocked":
        sup.store.set_job(p.job, None, reason="the operator retried", state="gating")
        return "the job's gate runs again"
    if reply == "retry":
        return "the job goes on"  # e.g. a raised budget: what can move now moves on the next pass
    return f"reply {reply} does not apply here"


def _request_replan(sup: Supervisor, job: str, words: str | None) -> None:
    """Plan the current revision again (the operator's words become a decision the assigner reads)."""
    from pilothouse.core.records import jobs
    from pilothouse.core.supervisor.planning import _launch_assigner

    if words:
        jobs.decide(sup.layout, job, words)
    record = jobs.load_job(sup.layout, job)
    sup.store.set_job(job, None, reason="re-planning at the operator's request", state="planning",
                      planned_revision=record.revision - 1)
    _launch_assigner(sup, record, record.revision, None)
