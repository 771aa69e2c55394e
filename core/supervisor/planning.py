"""Planning: a job's revision becomes a task graph, once per revision.

Either the operator (or a host agent) defined the graph — `task define --file` then
`job plan-ready NAME`, which records `plan_ready:<job>` = revision in the store's meta table —
or the assigner plans it: a dispatch in mode `plan` on the job's pinned coordinator, whose
result block `{tasks: […]}` goes through the task-graph validation. Invalid output goes back
to the same assigner session once, with the errors; a second failure stops the job's planning.
The assigner's runs carry the revision in `runs.attempt`, so a restart knows what was asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.stops.rules import classify_verdict
from pilothouse.core.supervisor import launch as L
from pilothouse.core.supervisor.context import job_scenario, policy_of
from pilothouse.core.supervisor.state import block_job
from pilothouse.providers.errors import UserError
from pilothouse.providers.registry import labelled

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor.loop import Supervisor

PLAN_TRIES = 2


def plan_ready_key(job: str) -> str:
    return f"plan_ready:{job}"


def mark_plan_ready(conn: sqlite3.Connection, job: str, revision: int) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                 (plan_ready_key(job), str(revision)))


def _plan_ready(sup: Supervisor, job: str) -> int:
    row = sup.conn.execute("SELECT value FROM meta WHERE key=?", (plan_ready_key(job),)).fetchone()
    return int(row["value"]) if row else 0


def step(sup: Supervisor, job: Any, row: sqlite3.Row) -> bool:
    """True when the job's current revision is planned (its tasks may launch and merge)."""
    revision = job.revision
    if row["planned_revision"] >= revision:
        return True
    if _plan_ready(sup, job.name) >= revision:
        _adopt_defined(sup, job, revision)
        return sup.store.job(job.name)["planned_revision"] >= revision  # type: ignore[index]
    # a run `maintain repair` rebuilt has no result to act on: the planning it was part of runs again
    assigners = list(sup.conn.execute(
        f"SELECT * FROM runs WHERE job=? AND role='assigner' AND attempt=? AND {runs.NOT_REBUILT}"
        " ORDER BY started_at, rowid", (job.name, revision)))
    if row["state"] == "blocked" and row["reason"] and row["reason"].startswith("planning"):
        return False  # waiting for the operator's answer to the planning problem
    if not assigners:
        _launch_assigner(sup, job, revision, None)
        return False
    last = assigners[-1]
    if last["state"] != "finished":
        return False
    verdict = L.verdict_of(last)
    result = verdict.get("result") if verdict.get("parse_state") == "parsed" else None
    ended = [classify_verdict(L.verdict_of(a)) for a in assigners]  # ok | quota | auth | crash, per run
    if ended[-1] != "ok" and not result:
        return _planning_run_failed(sup, job, revision, last, verdict, ended)
    errors: list[str]
    if not isinstance(result, dict) or not isinstance(result.get("tasks"), list):
        errors = [f"no valid plan result block ({verdict.get('parse_error') or verdict.get('parse_state')}): "
                  "end your answer with <!--RESULT-->{\"tasks\": [...]}<!--/RESULT-->"]
        if labelled(last["provider"]) != last["provider"]:
            # init's roles where no key is configured: the operator's next step, not the model's
            errors.append(f"{labelled(last['provider'])} has no scripted plan for this job: script it for this "
                          "repository (docs/scenarios.md) and name the file with `job create --sim-scenario FILE` "
                          "or sim_scenario in .ai/project.yaml, or name a real provider in model_policy")
    else:
        try:
            _accept_plan(sup, job, revision, result["tasks"], source="assigner", run_id=last["run_id"])
            return True
        except _Invalid as exc:
            errors = exc.errors
    # runs that met a usage limit, refused credentials or crashed planned nothing: no correction round used
    if ended.count("ok") < PLAN_TRIES and verdict.get("session_id"):
        _launch_assigner(sup, job, revision, last, errors)
        return False
    # only the runs that answered with a plan count as invalid plans (not a crash or an endpoint error)
    _stop_planning(sup, job.name, revision, errors, last["run_id"], invalid=ended.count("ok"))
    return False


def _planning_run_failed(sup: Supervisor, job: Any, revision: int, last: sqlite3.Row, verdict: dict[str, Any],
                         ended: list[str]) -> bool:
    """The assigner's run ended without planning: a usage limit waits, refused credentials ask the
    operator, a crash gets one fresh try (like a builder's) and then asks, with the run's last words."""
    if ended[-1] == "quota":
        return _wait_for_quota(sup, job, revision, last["provider"])
    if ended[-1] == "auth":
        _stop_planning(sup, job.name, revision, [f"the assigner's provider {last['provider']} refused its "
                                                 f"credentials: {verdict.get('error') or 'auth'}; fix the key "
                                                 "(pilothouse keys), then retry"], last["run_id"], kind="auth")
        return False
    why = f"the assigner run failed: {verdict.get('error') or verdict.get('verdict')}"
    if ended.count("crash") < 2:
        sup.events.append("job.waiting", job=job.name, data={"reason": f"{why}; planning again once"})
        _launch_assigner(sup, job, revision, None)
        return False
    _stop_planning(sup, job.name, revision, [why + " (twice)"], last["run_id"], kind="worker_crashed")
    return False


class _Invalid(Exception):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _accept_plan(sup: Supervisor, job: Any, revision: int, entries: list[Any], *, source: str,
                 run_id: str | None) -> None:
    from pilothouse.core.records.taskgraph import TaskGraphError, load_tasks, save_tasks, validate_tasks

    others = [t for t in load_tasks(sup.layout) if t.job_id != job.name]
    try:
        defs = validate_tasks(entries, sup.project, others, job=job.name)
    except TaskGraphError as exc:
        raise _Invalid(list(exc.errors)) from None
    if not defs:
        raise _Invalid(["the plan has no tasks: give at least one"])
    save_tasks(sup.layout, defs, replace_job=job.name)
    _install(sup, job.name, revision, [d.model_dump() for d in defs], source, run_id)


def _adopt_defined(sup: Supervisor, job: Any, revision: int) -> None:
    """The operator's graph (already validated by `task define`)."""
    from pilothouse.core.records.taskgraph import load_tasks

    defs = load_tasks(sup.layout, job.name)
    if defs and sup.store.job(job.name)["planned_revision"] == 0 and _idle(sup, job.name):  # type: ignore[index]
        _sync(sup, job.name)  # a new job starts from the base branch's head, as an assigner's would
    if not defs:
        sup.store.set_job(job.name, None, reason="plan-ready, but .ai/tasks.yaml has no tasks for this job",
                          state="planning")
        return
    _install(sup, job.name, revision, [d.model_dump() for d in defs], "operator", None)


def _install(sup: Supervisor, job: str, revision: int, entries: list[dict[str, Any]], source: str,
             run_id: str | None) -> None:
    new_ids = {e["id"] for e in entries}
    for t in sup.store.tasks(job):
        # a re-plan drops the tasks it no longer names, unless work on them is under way
        if t["task"] not in new_ids and t["state"] in ("planned", "ready", "waiting", "stopped", "needs_replan"):
            sup.store.set_task(job, t["task"], "cancelled", f"not in the plan of revision {revision}")
    first = sup.store.job(job)["planned_revision"] == 0  # type: ignore[index]
    added = sup.store.add_tasks(job, entries, revision)
    for e in entries:
        t = sup.store.task(job, e["id"])
        if t is not None and t["state"] == "needs_replan":
            sup.store.set_task(job, e["id"], "planned", f"kept by the plan of revision {revision}")
    sup.store.set_job(job, "job.planned", reason=f"planned by the {source}", state="running",
                      planned_revision=revision,
                      event_data={"revision": revision, "source": source, "run": run_id,
                                  "tasks": [e["id"] for e in entries], "new": added,
                                  "edges": {e["id"]: list(e.get("depends_on") or []) for e in entries}})
    if first:
        sup.events.append("job.started", job=job, data={"revision": revision, "tasks": len(entries)})
    _warn_overlap(sup, job, entries)
    if source == "operator":
        _close_planning_problems(sup, job, revision)


def _warn_overlap(sup: Supervisor, job: str, entries: list[dict[str, Any]]) -> None:
    """Another unshipped job writes the same files: said once, at planning, where it costs nothing.
    The jobs stay apart (each on its own line); the second to ship is merged onto the first and
    gated again, and a conflict is refused at ship naming the files."""
    from pilothouse.core.records.taskgraph import load_tasks

    mine = {p.rstrip("/") for e in entries for p in ((e.get("expected_paths") or {}).get("write") or [])}
    if not mine:
        return
    theirs: dict[str, set[str]] = {}
    for t in load_tasks(sup.layout):
        if t.job_id != job:
            theirs.setdefault(t.job_id, set()).update(p.rstrip("/") for p in t.expected_paths.write)
    for other, paths in sorted(theirs.items()):
        row = sup.store.job(other)
        if row is None or row["state"] in ("shipped", "failed", "cancelled"):
            continue
        both = sorted(a for a in mine for b in paths if a == b or a.startswith(b + "/") or b.startswith(a + "/"))
        if both:
            sup.events.append("job.overlap", job=job, data={
                "other": other, "paths": both[:20],
                "reason": f"job {other} also writes {', '.join(both[:5])}: whichever ships second is merged onto "
                          "the first and its full gate runs again; a conflict is refused at ship"})


def _close_planning_problems(sup: Supervisor, job: str, revision: int) -> None:
    """The operator planned the job by hand: a planning problem has nothing left to wait for."""
    from pilothouse.core.stops import problems

    for p in problems.list_problems(sup.layout, True, job=job, conn=sup.conn):
        if p.task is None and (p.kind == "plan_invalid" or p.summary.startswith("planning revision")):
            problems.close_problem(sup.layout, p.code, f"resolved: the operator defined the tasks of revision "
                                   f"{revision} by hand", conn=sup.conn, log=sup.events)


def _coordinator(sup: Supervisor, job: Any) -> tuple[str, str | None]:
    from pilothouse.core.records.jobs import pin_coordinator
    from pilothouse.core.stops import policy

    if job.coordinator is not None:
        return job.coordinator.provider, job.coordinator.model
    project, default = policy_of(sup, job.name)
    pin = policy.coordinator_pin(project, default=default, capable=policy.capability_gap)
    provider, _, model = pin.partition("/")
    job = pin_coordinator(sup.layout, job.name, provider, model or None)
    assert job.coordinator is not None
    sup.store.set_job(job.name, None, coordinator=pin)
    return job.coordinator.provider, job.coordinator.model


def _launch_assigner(sup: Supervisor, job: Any, revision: int, previous: sqlite3.Row | None,
                     errors: list[str] | None = None, note: str = "") -> None:
    from pilothouse.core.git.integration import ensure_integration_checkout
    from pilothouse.core.supervisor.context import launch_hold

    # a shared setup failure holds builders, not planning: a correction may be what fixes it
    hold = launch_hold(sup, job.name, setup=False)
    if hold:
        if sup.store.job(job.name)["reason"] != hold:  # type: ignore[index]
            sup.store.set_job(job.name, "job.blocked", reason=hold, state="blocked")
        return
    try:
        provider, model = _coordinator(sup, job)
    except UserError:
        if previous is None and _defined_by_hand(sup, job.name):
            # its tasks are being defined by hand (`task define`, then `job plan-ready`): a job
            # that needs no planner is not stopped for the lack of one
            why = f"{BY_HAND} `pilothouse job plan-ready {job.name}`"
            if sup.store.job(job.name)["reason"] != why:  # type: ignore[index]
                sup.store.set_job(job.name, None, reason=why, state="planning")
            return
        raise
    checkout = ensure_integration_checkout(sup.layout, sup.project, job.name)
    if previous is None and _idle(sup, job.name):
        _sync(sup, job.name)
    if previous is None:
        existing = [{"task": t["task"], "state": t["state"]} for t in sup.store.tasks(job.name)]
        text = L.plan_text(job, job.name, revision, L.repo_summary(checkout), existing) + note
        session = resume_of = None
    else:
        text = ("Your plan was rejected:\n" + "\n".join(f"- {e}" for e in (errors or [])) +
                "\n\nAnswer again with the whole corrected plan in one result block.\n")
        session, resume_of = L.verdict_of(previous).get("session_id"), previous["run_id"]
    launch = runs.Launch(run_id=runs.new_run_id(), job=job.name, task=None, role="assigner", provider=provider,
                         mode="plan", workdir=str(checkout), task_text=text, attempt=revision, model=model,
                         session_id=session, resume_of=resume_of, scenario=job_scenario(sup, job.name))
    sup.store.set_job(job.name, None, reason=f"planning revision {revision}", state="planning")
    L.start(sup, launch)


# the reason of a job whose tasks the operator is defining: nothing moves until they say plan-ready
BY_HAND = "tasks defined by hand: waiting for"


def _defined_by_hand(sup: Supervisor, job: str) -> bool:
    from pilothouse.core.records.taskgraph import load_tasks

    return bool(load_tasks(sup.layout, job))


STUCK_AFTER = 3  # invalid plans in a row before the problem says the model may never manage it


def _stop_planning(sup: Supervisor, job: str, revision: int, errors: list[str], run_id: str, *,
                   kind: str = "plan_invalid", invalid: int = 0) -> None:
    summary = f"planning revision {revision} failed: " + "; ".join(errors)[:600]
    if kind == "plan_invalid" and invalid >= STUCK_AFTER:
        summary += (f" — {invalid} plans were invalid: the model may be unable to follow the "
                    f"planning protocol. Define the tasks yourself (pilothouse task define --job {job} --file "
                    f"FILE, then pilothouse job plan-ready {job}), or pin a stronger coordinator")
    block_job(sup.store, job, summary, kind, summary, {"run": run_id, "errors": errors})


def _wait_for_quota(sup: Supervisor, job: Any, revision: int, provider: str) -> bool:
    """The assigner hit a usage limit: no problem for the operator, planning waits like a builder
    would — until the window resets (or its check is due), then a fresh assigner plans."""
    from pilothouse.core.stops import quota

    av = quota.may_launch(sup.layout, provider, poll_s=sup.project.availability_poll_seconds, conn=sup.conn)
    if av.available:
        _launch_assigner(sup, job, revision, None, note="\n(Planning again after a usage-limit wait.)\n")
        return False
    if av.next_check_at is not None:
        sup.wake_at(av.next_check_at.timestamp())
    # a fixed time, not av.reason's countdown: the reason (and its event) changes only when the wait does
    until = f" until {av.next_check_at.strftime('%Y-%m-%d %H:%M:%S UTC')}" if av.next_check_at else ""
    why = f"planning revision {revision} waits for {provider}'s usage limit{until}"
    if sup.store.job(job.name)["reason"] != why:  # type: ignore[index]
        sup.store.set_job(job.name, "job.waiting", reason=why, state="planning")
    return False


def _idle(sup: Supervisor, job: str) -> bool:
    """Nothing of the job under way (no work in flight, no run live): its line may move. Other
    jobs are not asked: their lines are their own."""
    if any(len(k) > 1 and k[1] == job for k in sup.inflight):
        return False
    return sup.conn.execute("SELECT 1 FROM runs WHERE job=? AND state='running' LIMIT 1", (job,)).fetchone() is None


def _sync(sup: Supervisor, job: str) -> None:
    """With nothing of the job in flight, bring the base branch's newer commits into the job's line
    (fast-forward, or a merge commit when it has merges of its own), so a new plan builds on what
    the operator committed, and the jobs shipped, since. Said in an event either way: a base that
    could not be brought in is why a job may fail the way the last one did."""
    from pilothouse.core.git.integration import sync_integration

    try:
        result = sync_integration(sup.layout, sup.project, job)
    except Exception as exc:  # noqa: BLE001 - planning goes on from the current integration head
        sup.log.warning("could not sync the integration branch: %s", exc)
        sup.events.append("integration.synced", job=job, data={"state": "error", "reason": str(exc)[:500]})
        return
    state = result.get("state")
    if state in ("fast-forwarded", "merged"):
        sup.good_heads.pop(job, None)  # recomputed at the next launch: the cached head is the old one
        sup.log.info("integration branch %s to %s", state, result.get("head"))
    if state != "up-to-date":
        reason = {"fast-forwarded": "the integration branch caught up with the base branch",
                  "merged": "the base branch's new commits were merged into the integration branch",
                  "conflict": "the base branch's new commits conflict with the integration branch in "
                              f"{', '.join(result.get('conflicts') or [])[:300]}: merge them there by hand "
                              "(pilothouse maintain worktrees list shows the checkout)"}[str(state)]
        sup.events.append("integration.synced", job=job, data={**result, "reason": reason})
