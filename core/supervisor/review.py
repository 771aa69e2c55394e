"""Reviews (per workflow.review), the job's end (combined gate, `once` review, acceptance), and the
operator's replies to problems.

- `ai`: a fresh reviewer per task and round (never the builder's session); CHANGES go back to the
  builder's own session, up to MAX_ROUNDS rounds; then the task stops.
- `once`: tasks merge after their gate; the combined change is reviewed once at the end.
- `off`: the gates decide. `human`: the task waits in `reviewing` for the operator's answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.state.events import utc_now_iso
from pilothouse.core.stops.budgets import job_usage
from pilothouse.core.supervisor import launch as L
from pilothouse.core.supervisor.context import job_scenario
from pilothouse.core.supervisor.state import ACTIVE, TERMINAL, block_job, counters, stop_task
from pilothouse.providers.errors import describe

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor.loop import Supervisor

MAX_ROUNDS = 3


def _reviewer(sup: Supervisor, job: str) -> tuple[str, str | None] | None:
    from pilothouse.core.stops import policy
    from pilothouse.core.supervisor.context import policy_of

    project, default = policy_of(sup, job)
    choice = policy.role_choice(project, "reviewer", None, default=default, capable=policy.capability_gap)
    return (choice.provider, choice.model) if choice.provider else None


def after_gate(sup: Supervisor, job: str, r: sqlite3.Row) -> None:
    mode = sup.project.workflow.review
    if counters(r).get("accepted_by_operator"):
        sup.store.set_task(job, r["task"], "approved", "gate passed; the operator accepted this commit")
    elif mode == "ai":
        launch_reviewer(sup, job, r)
    elif mode == "human":
        from pilothouse.core.stops import problems

        sup.store.set_task(job, r["task"], "reviewing", "gate passed; waiting for the operator's review")
        problems.open_problem(sup.layout, job, r["task"], "human_review",
                              f"{r['task']} passed its gate and waits for your review (branch {r['branch']})",
                              {"branch": r["branch"], "worktree": r["worktree"], "commit": r["commit_sha"]},
                              ["accept", "hint", "skip"], conn=sup.conn, log=sup.events)
    else:
        sup.store.set_task(job, r["task"], "approved",
                           "gate passed" + ("; reviewed with the whole job" if mode == "once" else ""))


def launch_reviewer(sup: Supervisor, job: str, r: sqlite3.Row) -> None:
    from pilothouse.core.git.checkout import diff_stat
    from pilothouse.core.git.integration import job_line
    from pilothouse.core.git.weakening import test_changes
    from pilothouse.core.supervisor.context import launch_hold

    tdef = _def(sup, job, r["task"])
    round_no = int(r["review_round"]) + 1
    hold = launch_hold(sup, job)
    if hold:
        if r["state"] != "reviewing":
            sup.store.set_task(job, r["task"], "reviewing", hold)  # the reviewer starts once the hold lifts
        return
    who = _reviewer(sup, job)
    if who is None:
        c = counters(r)
        c.update(wait_then="gating", wait_for=[sup.project.model_policy.roles.reviewer or "sim"])
        sup.store.set_task(job, r["task"], "waiting", "the reviewer's provider is at a usage limit", counters=c)
        return
    base = counters(r).get("base") or job_line(sup.project, job)
    stat = diff_stat(r["worktree"], base).get("text", "")
    c = counters(r)
    delta = L.test_delta_text(c.get("gate_counts"), c.get("base_counts"), c.get("holdout"),
                              test_changes(r["worktree"], base))
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=r["task"], role="reviewer", provider=who[0],
                         mode="review", workdir=r["worktree"],
                         task_text=L.review_text(job, tdef, round_no, base, stat, delta),
                         attempt=int(r["attempt"]), model=who[1], scenario=job_scenario(sup, job))
    L.start(sup, launch, task_state="reviewing", reason=f"review round {round_no}",
            fields={"review_round": round_no})


def _def(sup: Supervisor, job: str, tid: str) -> Any:
    from pilothouse.core.supervisor.context import task_defs

    return task_defs(sup)[(job, tid)]


def step(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> None:
    """A task in `reviewing`: wait for its reviewer, or act on the verdict."""
    run = sup.store.run(r["run_id"])
    if run is None or run["role"] != "reviewer":
        if sup.project.workflow.review == "ai" and not counters(r).get("accepted_by_operator"):
            launch_reviewer(sup, job, r)  # the state changed but the reviewer never got recorded
        return
    if run["state"] != "finished":
        return
    from pilothouse.core.stops import rules as stops
    from pilothouse.core.supervisor.scheduling import resume_builder

    v = L.verdict_of(run)
    result = v.get("result") if v.get("parse_state") == "parsed" else None
    round_no = int(r["review_round"])
    overall = result.get("overall") if isinstance(result, dict) else None
    findings = list(result.get("findings") or []) if isinstance(result, dict) else []
    _review_event(sup, job, r, run, overall, findings)
    d = stops.after_review(v, counters(r), review_round=round_no, log=run["log"])
    if d.action == stops.PROCEED:
        sup.store.set_task(job, r["task"], "approved", d.reason, counters=d.counters)
    elif d.action == stops.RESUME and resume_builder(sup, job, r, d.feedback or "", d.reason, d.counters):
        return
    elif d.action == stops.WAIT:
        c = dict(d.counters)
        c["wait_then"] = "gating"  # once the reviewer's provider is back: gate again, then a fresh review
        c["wait_for"] = [run["provider"]]
        sup.store.set_task(job, r["task"], "waiting", d.reason, counters=c)
    else:
        stop_task(sup.store, job, r["task"], d.reason, kind=d.kind or "review_rejected",
                  evidence=d.evidence, counters=d.counters)


def _review_event(sup: Supervisor, job: str, r: Any, run: Any, overall: str | None,
                  findings: list[dict[str, Any]]) -> None:
    sup.events.append("review.finished", job=job, task=r["task"] if r is not None else None, run=run["run_id"],
                      data={"round": int(r["review_round"]) if r is not None else 1, "overall": overall,
                            "findings": len(findings),
                            "summaries": [str(f.get("summary"))[:200] for f in findings[:5]]})


# --- the job's end ---------------------------------------------------------------------------

def finish_job(sup: Supervisor, job: str, planned: bool, hold: str | None = None) -> None:
    jr = sup.store.job(job)
    if jr is None or not planned:
        return
    # the tasks not ended, but of the planned ones only whether there are any (they never move the
    # job: every pass of a 500-task job built a tuple of each of them)
    marks = ",".join("?" * len(TERMINAL))
    cur = sup.conn.cursor()
    cur.row_factory = None
    left = list(cur.execute(f"SELECT task, state FROM tasks WHERE job=? AND state NOT IN ({marks}, 'planned') "
                            "ORDER BY rowid", (job, *TERMINAL)))
    if not left:
        left = list(cur.execute("SELECT task, state FROM tasks WHERE job=? AND state='planned' LIMIT 1", (job,)))
        if not left and cur.execute("SELECT 1 FROM tasks WHERE job=? LIMIT 1", (job,)).fetchone() is None:
            return
    state = jr["state"]
    if left:
        # full rows only where they decide: a live run (under a hold), a review waiting for a human
        wanted = ("running", "reviewing") if hold else ("reviewing",) if sup.project.workflow.review == "human" else ()
        rows = {tid: sup.store.task(job, tid) for tid, st in left if st in wanted}

        def awaits(tid: str) -> bool:
            row = rows.get(tid)
            return row is not None and _awaits_operator(sup, row)

        if hold:
            # held: only work already under way moves; ready tasks wait for the operator
            live = {rid for rid in sup.live_runs()}
            moving = any(st in ("gating", "approved", "merging") or
                         (rows.get(tid) is not None and rows[tid]["run_id"] in live) for tid, st in left)
        else:
            moving = any(st in (*ACTIVE, "ready", "waiting") and not awaits(tid) for tid, st in left)
        if not moving and not any(k[1] == job for k in sup.inflight if len(k) > 1) and state != "blocked":
            stopped = [tid for tid, st in left if st == "stopped" or awaits(tid)]
            why = hold or ("waiting for the operator: " + ", ".join(stopped))
            sup.store.set_job(job, "job.blocked", reason=why, state="blocked", event_data={"tasks": stopped})
        elif moving and state == "blocked":
            sup.store.set_job(job, None, reason="work resumed", state="running")
        return
    if cur.execute("SELECT 1 FROM tasks WHERE job=? AND state='done' LIMIT 1", (job,)).fetchone() is None:
        sup.store.set_job(job, "job.failed", reason="every task was skipped or cancelled", state="failed",
                          finished_at=utc_now_iso())
        from pilothouse.core.stops import budgets

        # ended as surely as an accepted job: a budget problem would wait for a retry with nothing to start
        budgets.settle(sup.layout, job, "the job failed: nothing is left to launch", conn=sup.conn, log=sup.events)
        return
    if state == "blocked" and str(jr["reason"] or "").startswith(_END_REASONS) and _job_problem_open(sup, job):
        return  # the full gate or the combined review stopped the job: it waits for the operator's reply
    if state in ("running", "blocked", "planning"):
        sup.store.set_job(job, None, reason="every task merged; the full gate runs on the integration branch",
                          state="gating")
        state = "gating"
    if state == "gating":
        _start_job_gate(sup, job)
    elif state == "reviewing":
        _combined_review_step(sup, job)


# the stops of a job whose tasks are all done: only the operator's answer moves it on
_END_STOPS = ("gate_failed", "review_rejected", "reviewer_failed")
_END_REASONS = ("the full gate", "the combined review")  # how those stops word the job's reason


def _job_problem_open(sup: Supervisor, job: str) -> bool:
    marks = ",".join("?" * len(_END_STOPS))
    return sup.conn.execute(f"SELECT 1 FROM problems WHERE job=? AND task IS NULL AND state != 'closed' "
                            f"AND kind IN ({marks}) LIMIT 1", (job, *_END_STOPS)).fetchone() is not None


def _awaits_operator(sup: Supervisor, r: sqlite3.Row) -> bool:
    return bool(r["state"] == "reviewing" and sup.project.workflow.review == "human"
                and not counters(r).get("accepted_by_operator"))


def _start_job_gate(sup: Supervisor, job: str) -> None:
    from pilothouse.core.git.integration import run_integration_gate

    key = ("jobgate", job)
    if key in sup.inflight:
        return
    layout, project = sup.layout, sup.project
    sup.events.append("gate.started", job=job, data={"level": "full", "where": "integration"})
    from pilothouse.core.git.gates import gate_log

    # the job's own gate: its whole output beside the tasks' (gate_log's task slot is the job's)
    log = gate_log(layout.runtime, job, "_job", "full")
    sup.work(key, lambda: run_integration_gate(layout, project, job, "full", log_to=log),
             lambda res, exc: _job_gate_done(sup, job, res, exc))


def _job_gate_done(sup: Supervisor, job: str, res: Any, exc: BaseException | None) -> None:
    from pilothouse.core.git.integration import job_line

    jr = sup.store.job(job)
    if jr is None or jr["state"] != "gating":
        return
    passed = bool(res is not None and res.passed)
    reason = (res.reason if res is not None else None) or (describe(exc) if exc else None)
    tail = (res.output_tail if res is not None else "")[-1500:]
    from pilothouse.core.git.gate_counts import gate_record

    sup.events.append("gate.finished", job=job, data={
        "level": "full", "where": "integration", "passed": passed, "reason": reason, "output_tail": tail,
        **(gate_record(res.to_dict()) if res is not None else {})})
    if not passed:
        failed = "could not run" if res is None else "failed"
        block_job(sup.store, job, f"the full gate {failed} on the integration branch: {reason}", "gate_failed",
                  f"the full gate {failed} on {job_line(sup.project, job)}: {reason}", {"output_tail": tail},
                  ["retry"])
        return
    if sup.project.workflow.review == "once":
        _launch_combined_review(sup, job)
    else:
        accept(sup, job)


def _launch_combined_review(sup: Supervisor, job: str) -> None:
    from pilothouse.core.git.checkout import diff_stat
    from pilothouse.core.git.integration import ensure_integration_checkout

    who = _reviewer(sup, job)
    if who is None:
        return
    checkout = ensure_integration_checkout(sup.layout, sup.project, job)
    rows = sup.store.tasks(job)
    base = next((counters(r).get("base") for r in rows if counters(r).get("base")), None) or "HEAD~1"
    stat = diff_stat(checkout, base).get("text", "")
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=None, role="reviewer", provider=who[0],
                         mode="review", workdir=str(checkout),
                         task_text=L.combined_review_text(job, base, stat, [r["task"] for r in rows]),
                         attempt=int(sup.store.job(job)["revision"]), model=who[1],  # type: ignore[index]
                         scenario=job_scenario(sup, job))
    sup.store.set_job(job, None, reason="the combined change is being reviewed", state="reviewing")
    L.start(sup, launch)


def _combined_review_step(sup: Supervisor, job: str) -> None:
    run = sup.conn.execute(f"SELECT * FROM runs WHERE job=? AND task IS NULL AND role='reviewer' AND {runs.NOT_REBUILT}"
                           " ORDER BY started_at DESC, rowid DESC LIMIT 1", (job,)).fetchone()
    if run is None:
        _launch_combined_review(sup, job)
        return
    if run["state"] != "finished":
        return
    v = L.verdict_of(run)
    result = v.get("result") if v.get("parse_state") == "parsed" else None
    overall = result.get("overall") if isinstance(result, dict) else None
    findings = list(result.get("findings") or []) if isinstance(result, dict) else []
    _review_event(sup, job, None, run, overall, findings)
    if overall == "PASS":
        accept(sup, job)
        return
    summary = f"the combined review says {overall or 'nothing usable'}: " + "; ".join(
        str(f.get("summary")) for f in findings[:3])
    block_job(sup.store, job, summary, "review_rejected" if overall else "reviewer_failed", summary,
              {"run": run["run_id"], "findings": findings}, ["plan", "accept"] if overall else ["retry", "accept"])


def accept(sup: Supervisor, job: str) -> None:
    from pilothouse.core.git.integration import integration_head, job_line
    from pilothouse.core.git.worktrees import remove_job_worktrees

    rows = sup.store.tasks(job)
    jr = sup.store.job(job)
    merged = sum(r["state"] == "done" for r in rows)
    left = [f"{n} {state}" for state in ("skipped", "cancelled") if (n := sum(r["state"] == state for r in rows))]
    reason = ("every task merged" if not left else f"{merged} task(s) merged ({', '.join(left)})") + \
        " and the full gate passed"
    sup.store.set_job(job, "job.accepted", reason=reason, state="accepted",
                      finished_at=utc_now_iso(),
                      event_data={"integration_branch": job_line(sup.project, job),
                                  "head": integration_head(sup.layout, sup.project, job),
                                  "tasks": [r["task"] for r in rows if r["state"] == "done"],
                                  "tokens": jr["tokens"] if jr is not None else None,
                                  "usage": job_usage(sup.layout, job, conn=sup.conn)})
    from pilothouse.core.stops import budgets

    budgets.settle(sup.layout, job, "the job was accepted: nothing is left to launch", conn=sup.conn,
                   log=sup.events)
    try:
        from pilothouse.core.records.jobs import Outcome, record_outcome

        # in the committed record too: a fresh clone, or a rebuilt state.db, never builds it again
        record_outcome(sup.layout, job, Outcome(state="accepted", revision=int(jr["revision"]) if jr else 1,
                                                at=utc_now_iso(), head=integration_head(sup.layout, sup.project, job),
                                                tasks=[r["task"] for r in rows if r["state"] == "done"]))
    except Exception as exc:  # noqa: BLE001 - the record is the operator's file: acceptance stands without it
        sup.log.warning("could not record the outcome of job %s: %s", job, exc)
    try:
        # the branches stay (they hold the history); the checkouts are no longer needed
        remove_job_worktrees(sup.layout, job)
    except Exception as exc:  # noqa: BLE001 - cleanup must not undo an acceptance
        sup.log.warning("could not remove the worktrees of job %s: %s", job, exc)
