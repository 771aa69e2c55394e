"""A task's way through the supervisor: ready → running → gating → reviewing → approved → merging → done.

Each function looks at one task in the state the store holds and moves it on when it can; it is
safe to call again after a crash (a builder's work is committed idempotently, a gate is simply
rerun, a recorded merge intent is redone through the idempotent merge_train).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pilothouse.core.git import gate_counts
from pilothouse.core.supervisor import launch as L
from pilothouse.core.supervisor import review
from pilothouse.core.supervisor.answers import apply_replies  # noqa: F401  (the loop calls it through here)
from pilothouse.core.supervisor.context import launch_hold, task_defs
from pilothouse.core.supervisor.merging import secret_found, start_merges
from pilothouse.core.supervisor.scheduling import launch_ready, resume_builder  # noqa: F401
from pilothouse.core.supervisor.state import TERMINAL, counters, stop_task
from pilothouse.providers.errors import describe

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor.loop import Supervisor


def _deps(row: sqlite3.Row) -> tuple[str, ...]:
    return _parsed_deps(row["depends_on"])


@lru_cache(maxsize=8192)
def _parsed_deps(text: str | None) -> tuple[str, ...]:
    # every pass looks at every planned task's dependencies: a 500-task job parsed the same JSON
    # hundreds of thousands of times
    return tuple(json.loads(text or "[]"))


def step_job(sup: Supervisor, job: str, planned: bool) -> list[tuple[str, Any, Any]]:
    """Move each task of the job on; returns the tasks ready to launch (launches wait for the plan)."""
    defs = task_defs(sup)
    moves = sup.store.moves  # reading the rows below writes nothing
    rows = _movable(sup, job, defs)
    ready: list[tuple[str, Any, Any]] = []
    merges: list[tuple[sqlite3.Row, Any]] = []
    hold = launch_hold(sup, job) if rows else None
    for prefetched, deps_done in rows:
        tid = prefetched["task"]
        try:
            # a step earlier in this pass may have moved this task too: its row is read again then
            r = prefetched if sup.store.moves == moves else sup.store.task(job, tid)
            if r is not None and r["state"] not in TERMINAL and r["state"] != "stopped":
                _step_task(sup, job, r, defs.get((job, tid)), deps_done, planned, ready, merges)
        except Exception as exc:  # noqa: BLE001 - one task's trouble must not stop the others
            sup.log.exception("task %s/%s: %s", job, tid, exc)
            try:
                stop_task(sup.store, job, tid, f"the supervisor failed on this task: {describe(exc)}",
                          kind="worker_crashed", evidence={"error": repr(exc)})
            except Exception:  # noqa: BLE001
                sup.log.exception("cannot stop task %s/%s", job, tid)
    start_merges(sup, job, merges)
    if hold:
        for _, r, _ in ready:
            if r is not None and r["reason"] != hold:
                sup.store.update_task(job, r["task"], reason=hold)
        ready = []
    review.finish_job(sup, job, planned, hold)
    return ready


_LIVE = ("done", "skipped", "cancelled", "stopped", "planned")  # the states a pass never steps (planned: see below)


def _movable(sup: Supervisor, job: str, defs: dict[tuple[str, str], Any]) -> list[tuple[sqlite3.Row, bool]]:
    """The job's tasks a pass may move, in plan order: every live one, and the planned ones whose
    dependencies are done (SQLite looks: a 500-task job's pass builds no row, not even a tuple, of
    each of the hundreds of tasks still waiting). After tasks.yaml changed (and on a supervisor's
    first pass), every planned task too: one whose definition is gone is re-planned whatever its
    dependencies."""
    rows: list[tuple[sqlite3.Row, bool]] = []
    marks = ",".join("?" * len(_LIVE))
    if sup.defs_stepped.get(job) is not defs:
        scan = sup.store.task_states(job)
        states = {tid: st for tid, st, _ in scan}
        for tid, st, deps in scan:
            if st in TERMINAL or st == "stopped":
                continue
            done = all(states.get(d) == "done" for d in _parsed_deps(deps))
            if st == "planned" and (job, tid) in defs and not done:
                continue
            r = sup.store.task(job, tid)
            if r is not None:
                rows.append((r, done))
        sup.defs_stepped[job] = defs
        return rows
    # deps_done matters to planned tasks only, and the only planned ones here have theirs done
    rows.extend((r, True) for r in sup.conn.execute(
        f"SELECT * FROM tasks t WHERE t.job=? AND (t.state NOT IN ({marks}) OR (t.state='planned' AND NOT EXISTS ("
        " SELECT 1 FROM json_each(COALESCE(NULLIF(t.depends_on, ''), '[]')) d WHERE NOT EXISTS ("
        "  SELECT 1 FROM tasks u WHERE u.job=t.job AND u.task=d.value AND u.state='done')))) ORDER BY t.rowid",
        (job, *_LIVE)))
    return rows


def _step_task(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any, deps_done: bool, planned: bool,
               ready: list[tuple[str, Any, Any]], merges: list[tuple[sqlite3.Row, Any]]) -> None:
    st, tid = r["state"], r["task"]
    if tdef is None:
        if st in ("planned", "ready", "waiting"):
            sup.store.set_task(job, tid, "needs_replan", "its definition is gone from .ai/tasks.yaml")
        return
    if st == "planned" and deps_done:
        sup.store.set_task(job, tid, "ready", "dependencies done" if _deps(r) else "no dependencies")
        st = "ready"
    if st == "ready" and planned:
        ready.append((job, sup.store.task(job, tid), tdef))
    elif st == "waiting":
        c = counters(r)
        providers = list(c.get("wait_for") or ([r["provider"]] if r["provider"] else []))
        if not providers or any(_available(sup, p) for p in providers):
            target = c.pop("wait_then", "ready")
            c.pop("wait_for", None)
            sup.store.set_task(job, tid, target, f"{', '.join(providers) or 'the provider'} may take work again",
                               counters=c)
            if planned and target == "ready":
                ready.append((job, sup.store.task(job, tid), tdef))
    elif st == "running":
        run = sup.store.run(r["run_id"])
        if run is not None and run["state"] == "finished":
            builder_done(sup, job, r, tdef, run)
    elif st == "gating":
        start_gate(sup, job, r, tdef)
    elif st == "reviewing":
        review.step(sup, job, r, tdef)
    elif st in ("approved", "merging") and planned:
        merges.append((r, tdef))


def _available(sup: Supervisor, provider: str | None) -> bool:
    if not provider:
        return True
    from pilothouse.core.stops import quota

    av = quota.availability(sup.layout, provider, conn=sup.conn)
    if not av.available and not av.check_due and av.next_check_at is not None:
        sup.wake_at(av.next_check_at.timestamp())  # look again then, without polling meanwhile
    # a due check makes the task ready; the launch claims the one check (quota.may_launch)
    return av.available or av.check_due


def note_quota(sup: Supervisor, row: sqlite3.Row, verdict: dict[str, Any]) -> None:
    from pilothouse.core.stops import quota

    try:
        quota.record_verdict(sup.layout, row["provider"], verdict, conn=sup.conn, log=sup.events,
                             job=row["job"], task=row["task"], run=row["run_id"])
    except TypeError:
        quota.record_verdict(sup.layout, row["provider"], verdict, conn=sup.conn, log=sup.events)


# --- after the builder -----------------------------------------------------------------------

def builder_done(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any, run: sqlite3.Row) -> None:
    """The builder's run finished: commit its work (in a thread), then decide what comes next."""
    from pilothouse.core.git.checkout import commit_all, head
    from pilothouse.core.git.records import restore_records
    from pilothouse.core.stops import rules as stops

    tid, run_id = r["task"], run["run_id"]
    key = ("commit", job, tid)
    if key in sup.inflight:
        return
    if stops.classify_verdict(L.verdict_of(run)) != "ok":
        _after_builder(sup, job, tid, tdef, run_id, None, None)
        return
    if run["mode"] == "explore":
        _research_done(sup, job, r, run)
        return
    worktree = r["worktree"]
    message = f"{tid}: {tdef.title}\n\njob: {job}\ntask: {tid}\nrun: {run_id}"

    base = counters(r).get("base")

    def commit() -> str:
        # .ai is put back as the task's base has it first: the worker's own commits may touch it too
        restore_records(worktree, str(base) if base else None)
        return commit_all(worktree, message) or head(worktree)

    sup.work(key, commit, lambda res, exc: _after_builder(sup, job, tid, tdef, run_id, res, exc, message))


def _commit_failed(sup: Supervisor, job: str, tid: str, run: sqlite3.Row, exc: BaseException,
                   message: str, session: str | None) -> None:
    """The builder's work is in its worktree but cannot be committed. git's own words run to a
    dozen lines: the problem gets the one that says why. A missing author identity is the
    repository's setup, alike for every task: a setup failure (two alike hold the job). The
    evidence names the step, so a retry commits that work again instead of running a builder on
    top of it (answers.py)."""
    from pilothouse.core.git.leaks import SecretInDiff
    from pilothouse.core.git.records import ScopeViolation
    from pilothouse.core.git.worktrees import GitError

    if isinstance(exc, ScopeViolation):
        stop_task(sup.store, job, tid, f"scope violation: {exc}", kind="scope_violation",
                  evidence={"run": run["run_id"], "paths": exc.paths[:20], "step": "commit",
                            "commit_message": message})
        return
    if isinstance(exc, SecretInDiff):
        # the session is kept: a hint lets the same builder take the credential out again
        row = sup.store.task(job, tid)
        worktree = str(row["worktree"] or "") if row is not None else ""
        secret_found(sup, job, tid, exc, {"run": run["run_id"], "worktree": worktree}, session_id=session)
        return
    step = {"step": "commit", "commit_message": message}

    detail = exc.stderr if isinstance(exc, GitError) else str(exc)
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip() and not ln.strip().startswith("***")]
    why = lines[0] if lines else describe(exc)
    if "Author identity unknown" in detail or "empty ident name" in detail or "unable to auto-detect email" in detail:
        stop_task(sup.store, job, tid, "cannot commit the builder's work: git has no author identity here: set "
                  "it in the repository (git config user.name NAME; git config user.email EMAIL), then retry",
                  kind="setup_failed", evidence={"command": "git commit", "output_tail": detail[-800:],
                                                 "run": run["run_id"], **step})
        return
    stop_task(sup.store, job, tid, f"cannot commit the builder's work: {why}", kind="worker_crashed",
              evidence={"run": run["run_id"], "log": run["log"], "error": detail[-800:], **step})


def _check_paths(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> None:
    """Off the critical path (the gate is already running): name what the task changed outside its
    expected_paths.write."""
    from pilothouse.core.git.worktrees import some_paths

    worktree, base, writes = r["worktree"], counters(r).get("base"), list(tdef.expected_paths.write)

    def noted(files: list[str] | None, exc: BaseException | None) -> None:
        if files:
            sup.events.append("task.paths_exceeded", job=job, task=r["task"], data={
                "files": files[:50], "declared": writes,
                "reason": f"it also changed {some_paths(files)}, outside its expected_paths.write"})

    sup.work(("paths", job, r["task"]), lambda: _undeclared(worktree, base, writes), noted)


def _undeclared(worktree: str, base: str | None, writes: list[str]) -> list[str]:
    """Files the task changed outside its expected_paths.write: the scheduler ran it beside tasks
    on the strength of those paths, so the operator and its reviewer should know."""
    from pilothouse.core.git.checkout import changed_files
    from pilothouse.core.supervisor.scheduling import _overlap

    if not base or not writes:
        return []
    try:
        files = changed_files(worktree, base)
    except Exception:  # noqa: BLE001 - only a note; the gate and the merge judge the work
        return []
    return [f for f in files if not any(_overlap(f, w) for w in writes)]


def _after_builder(sup: Supervisor, job: str, tid: str, tdef: Any, run_id: str, now: str | None,
                   exc: BaseException | None, message: str = "") -> None:
    from pilothouse.core.stops import rules as stops

    r = sup.store.task(job, tid)
    run = sup.store.run(run_id)
    if r is None or run is None or r["state"] != "running" or r["run_id"] != run_id:
        return
    v = L.verdict_of(run)
    if not v.get("interrupted") and _aborted(sup, run_id):
        v = {**v, "interrupted": True}
    session = v.get("session_id") or r["session_id"]
    if exc is not None:
        _commit_failed(sup, job, tid, run, exc, message, session)
        return
    resumed = run["mode"] == "resume"
    # on a first run, the attempt's base is recorded in commit_sha: no move means no commit, unless
    # the branch already holds work since the task's base (an earlier attempt's, never merged)
    earlier = now is not None and now != counters(r).get("base", now)
    commit = now if now is not None and (resumed or now != r["commit_sha"] or earlier) else None
    d = stops.after_builder(v, counters(r), commit=commit, last_submitted=r["commit_sha"] if resumed else None,
                            log=run["log"], base=counters(r).get("base"))
    if d.action == stops.PROCEED:
        assert commit is not None
        sup.store.set_task(job, tid, "gating", f"{d.reason} ({v.get('verdict')})", commit_sha=commit,
                           session_id=session, activity=None, counters=d.counters)
        row = sup.store.task(job, tid)
        start_gate(sup, job, row, tdef)  # type: ignore[arg-type]
        _check_paths(sup, job, row, tdef)  # type: ignore[arg-type]
    elif d.action == stops.WAIT:
        # a usage limit is not a failure: the attempt is given back and the task waits; the event says
        # the attempt it is on now, which every view of the log reads (core/queries/task_figures.py)
        c = _carry(sup, run_id, resumed, d.counters)  # the builder after the wait is a fresh one
        c["wait_for"] = [r["provider"]]
        c["quota_waits"] = int(c.get("quota_waits", 0)) + 1
        attempt = max(0, int(r["attempt"]) - 1)
        sup.store.set_task(job, tid, "waiting", d.reason, attempt=attempt, session_id=session, counters=c,
                           event_data={"attempt": attempt})
    elif d.action == stops.RERUN:
        sup.store.set_task(job, tid, "ready", d.reason, counters=_carry(sup, run_id, resumed, d.counters))
    else:
        stop_task(sup.store, job, tid, d.reason, kind=d.kind or "worker_crashed", evidence=d.evidence,
                  counters=d.counters, session_id=session)


def _carry(sup: Supervisor, run_id: str, resumed: bool, counters: dict[str, Any]) -> dict[str, Any]:
    """`counters` for a task whose next builder is a fresh one: when this run was a resume that ended
    without a result (its sandbox gone with its node, a crash, a timeout, a usage limit), the text it
    was to answer (gate output, findings, a hint) goes to that builder (scheduling.py)."""
    from pilothouse.core.dispatch import runs

    c = dict(counters)
    spec = runs.read_spec(sup.layout, run_id) if resumed else None
    carried = _carried(spec.task_text if spec is not None else "")
    if carried:
        c["carried"] = carried
    return c


def _carried(text: str) -> str:
    """What a lost resume was to answer, as the fresh builder may be handed it: its head (the
    supervisor's own words come first), never a text dispatch would refuse (gate output can hold a
    credential-shaped test fixture: the fresh builder would be refused too, where without it the
    task recovers), and redacted (it is kept in state.db until that builder starts)."""
    from pilothouse.providers import guard, keys
    from pilothouse.providers.errors import UserError
    from pilothouse.providers.redact import configured_redactor

    text = configured_redactor().redact(text[:6000])
    try:
        guard.check_task(text, keys.configured_secrets())
    except UserError:
        return ""
    return text


def _aborted(sup: Supervisor, run_id: str) -> bool:
    from pilothouse.core.supervisor.control import aborted_key

    return sup.conn.execute("SELECT 1 FROM meta WHERE key=?", (aborted_key(run_id),)).fetchone() is not None


def _research_done(sup: Supervisor, job: str, r: sqlite3.Row, run: sqlite3.Row) -> None:
    """A RESEARCH task: nothing to commit, gate or merge; its facts are its result."""
    v = L.verdict_of(run)
    result = v.get("result") if v.get("parse_state") == "parsed" else None
    facts = list((result or {}).get("facts") or [])
    if not facts:
        stop_task(sup.store, job, r["task"], "the research run returned no facts "
                  f"({v.get('parse_error') or v.get('parse_state')})", kind="builder_blocked",
                  evidence={"run": run["run_id"], "log": run["log"]})
        return
    sup.store.set_task(job, r["task"], "done", f"research: {len(facts)} facts", activity=None,
                       event_data={"facts": facts[:20], "truncated": bool((result or {}).get("truncated"))})


def start_gate(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> None:
    from pilothouse.core.git.gates import gate_log, run_gate

    key = ("gate", job, r["task"])
    if key in sup.inflight:
        return
    level = tdef.gate_level or "fast"
    project, cwd = sup.project, r["worktree"]
    sup.events.append("gate.started", job=job, task=r["task"], data={"level": level, "where": "worktree",
                                                                     "command": project.gates.get(level)})
    # the operator's accept of a weakened gate is the override: its gate runs again, unjudged
    base = None if counters(r).get("accepted_by_operator") else counters(r).get("base")
    log = gate_log(sup.layout.runtime, job, r["task"], level)  # the cockpit's gate output view reads it

    def measure() -> tuple[Any, list[Any], Any, str | None]:
        from pilothouse.core.supervisor import weakened

        res = run_gate(project, level, cwd, log_to=log)
        if not res.passed:
            try:
                return res, [], None, weakened.fails_on_base(project, level, cwd, base, res)
            except Exception:  # noqa: BLE001 - only tells a cause apart; the failure stands either way
                return res, [], None, None
        return (res, *weakened.check(project, level, cwd, base, tdef, res), None)

    sup.work(key, measure, lambda out, exc: gate_done(sup, job, r["task"], level, out[0] if out else None, exc,
                                                      weak=out[1] if out else None, base_counts=out[2] if out else None,
                                                      base_fails=out[3] if out else None))


def gate_done(sup: Supervisor, job: str, tid: str, level: str, res: Any, exc: BaseException | None, *,
              weak: list[Any] | None = None, base_counts: dict[str, Any] | None = None,
              base_fails: str | None = None) -> None:
    from pilothouse.core.stops import rules as stops

    r = sup.store.task(job, tid)
    if r is None or r["state"] != "gating":
        return
    gate = res.to_dict() if res is not None else {"level": level, "passed": False, "command": "",
                                                   "reason": f"the gate crashed: {exc!r}", "output_tail": ""}
    tail = str(gate.get("output_tail") or "")[-1500:]
    sup.events.append("gate.finished", job=job, task=tid, data={
        "level": level, "passed": bool(gate.get("passed")), "where": "worktree", "reason": gate.get("reason"),
        "output_tail": tail, **gate_counts.gate_record(gate)})
    d = stops.after_gate(gate, counters(r), base_fails=base_fails)
    if d.action == stops.PROCEED and weak:
        from pilothouse.core.git.weakening import summary

        stop_task(sup.store, job, tid, f"The gate passed, but the work weakened it: {summary(weak)}.",
                  kind="gate_weakened", evidence={"level": level, "command": gate.get("command"),
                                                  "weakened": [w.to_dict() for w in weak][:50],
                                                  "counts": gate.get("counts"), "base_counts": base_counts},
                  counters=d.counters)
        return
    if d.action == stops.PROCEED:
        # what the reviewer reads first (launch.test_delta_text)
        d.counters.update(gate_counts=gate.get("counts"), base_counts=base_counts, holdout=gate.get("holdout"))
        sup.store.update_task(job, tid, counters=d.counters)
        review.after_gate(sup, job, sup.store.task(job, tid))  # type: ignore[arg-type]
        return
    if d.action == stops.RESUME and resume_builder(sup, job, r, d.feedback or "", d.reason, d.counters):
        return
    stop_task(sup.store, job, tid, d.reason, kind=d.kind or "gate_failed", evidence=d.evidence or {
        "command": gate.get("command"), "output_tail": tail, "level": level}, counters=d.counters)
