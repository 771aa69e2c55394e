"""A task's way through the supervisor: ready → running → gating → reviewing → approved → merging → done.

Each function looks at one task in the state the store holds and moves it on when it can; it is
safe to call again after a crash (a builder's work is committed idempotently, a gate is simply
rerun, a recorded merge intent is redone through the idempotent merge_task).
"""

from __future__ import annotations

import json
import time
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core import runs
from pilothouse.core import supervisor_launch as L
from pilothouse.core import supervisor_review as review
from pilothouse.core.events import utc_now_iso
from pilothouse.core.supervisor_replies import apply_replies  # noqa: F401  (the loop calls it through here)
from pilothouse.core.supervisor_state import ACTIVE, TERMINAL, counters, stop_task
from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor import Supervisor



def integration_good_head(sup: Supervisor) -> str | None:
    """The integration head to start new worktrees from: never a merge whose gate has not passed."""
    from pilothouse.core.integration import integration_head
    from pilothouse.core.worktrees import worktree_root

    try:
        pending = json.loads((worktree_root(sup.layout) / "integration.pending.json").read_text())
        return str(pending["previous_sha"])
    except (OSError, ValueError, KeyError, TypeError):
        return integration_head(sup.layout, sup.project)


def _defs(sup: Supervisor) -> dict[tuple[str, str], Any]:
    from pilothouse.core.taskgraph import load_tasks

    try:
        mtime = sup.layout.tasks_yaml.stat().st_mtime_ns
    except FileNotFoundError:
        mtime = None
    cache = getattr(sup, "_defs_cache", None)
    if cache is None or cache[0] != mtime:
        cache = (mtime, {(t.job_id, t.id): t for t in load_tasks(sup.layout)})
        sup._defs_cache = cache  # type: ignore[attr-defined]
    return cache[1]


def _deps(row: sqlite3.Row) -> list[str]:
    return list(json.loads(row["depends_on"] or "[]"))


def step_job(sup: Supervisor, job: str, planned: bool) -> list[tuple[str, Any, Any]]:
    """Move each task of the job on; returns the tasks ready to launch (launches wait for the plan)."""
    defs = _defs(sup)
    rows = sup.store.tasks(job)
    states = {r["task"]: r["state"] for r in rows}
    ready: list[tuple[str, Any, Any]] = []
    for r in rows:
        if r["state"] in TERMINAL or r["state"] == "stopped":
            continue
        try:
            _step_task(sup, job, r, defs.get((job, r["task"])), states, planned, ready)
        except Exception as exc:  # noqa: BLE001 - one task's trouble must not stop the others
            sup.log.exception("task %s/%s: %s", job, r["task"], exc)
            try:
                stop_task(sup.store, job, r["task"], f"the supervisor failed on this task: {exc}",
                          kind="worker_crashed", evidence={"error": repr(exc)})
            except Exception:  # noqa: BLE001
                sup.log.exception("cannot stop task %s/%s", job, r["task"])
    review.finish_job(sup, job, planned)
    return ready


def _step_task(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any, states: dict[str, str], planned: bool,
               ready: list[tuple[str, Any, Any]]) -> None:
    st, tid = r["state"], r["task"]
    if tdef is None:
        if st in ("planned", "ready", "waiting"):
            sup.store.set_task(job, tid, "needs_replan", "its definition is gone from .ai/tasks.yaml")
        return
    if st == "planned" and all(states.get(d) == "done" for d in _deps(r)):
        sup.store.set_task(job, tid, "ready", "dependencies done" if _deps(r) else "no dependencies")
        st = "ready"
    if st == "ready" and planned:
        ready.append((job, sup.store.task(job, tid), tdef))
    elif st == "waiting":
        if _available(sup, r["provider"]):
            c = counters(r)
            target = c.pop("wait_then", "ready")
            sup.store.set_task(job, tid, target, f"{r['provider'] or 'the provider'} is available again",
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
        start_merge(sup, job, r, tdef)


def _available(sup: Supervisor, provider: str | None) -> bool:
    if not provider:
        return True
    from pilothouse.core import quota

    av = quota.availability(sup.layout, provider, conn=sup.conn)
    if not av.available and av.next_check_at is not None:
        sup.wake_at(av.next_check_at.timestamp())  # look again then, without polling meanwhile
    return av.available


def note_quota(sup: Supervisor, row: sqlite3.Row, verdict: dict[str, Any]) -> None:
    from pilothouse.core import quota

    try:
        quota.record_verdict(sup.layout, row["provider"], verdict, conn=sup.conn, log=sup.events,
                             job=row["job"], task=row["task"], run=row["run_id"])
    except TypeError:
        quota.record_verdict(sup.layout, row["provider"], verdict, conn=sup.conn, log=sup.events)


# --- launching -------------------------------------------------------------------------------

def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or fnmatch(a, b) or fnmatch(b, a)


def _hot(sup: Supervisor, t: Any) -> bool:
    return bool(t.kind == "HOTSPOT" or any(_overlap(w, h) for w in t.expected_paths.write
                                            for h in sup.project.hotspots))


def conflict(sup: Supervisor, t: Any, others: list[Any]) -> Any | None:
    """The active task whose paths this one may not share (write/write; a HOTSPOT shares nothing)."""
    mine_w = list(t.expected_paths.write)
    mine_all = mine_w + list(t.expected_paths.read)
    for o in others:
        theirs_w = list(o.expected_paths.write)
        if any(_overlap(x, y) for x in mine_w for y in theirs_w):
            return o
        if (_hot(sup, t) or _hot(sup, o)) and any(
                _overlap(x, y) for x in mine_all for y in theirs_w + list(o.expected_paths.read)):
            return o
    return None


def launch_ready(sup: Supervisor, candidates: list[tuple[str, Any, Any]]) -> None:
    defs = _defs(sup)
    capacity = sup.max_workers - sup.busy_count()
    marks = ",".join("?" * len(ACTIVE))
    active = [defs[(r["job"], r["task"])] for r in sup.conn.execute(
        f"SELECT job, task FROM tasks WHERE state IN ({marks})", ACTIVE) if (r["job"], r["task"]) in defs]
    for job, r, tdef in candidates:
        if capacity <= 0:
            return
        if r is None or r["state"] != "ready":
            continue
        other = conflict(sup, tdef, active)
        if other is not None:
            why = f"waits for {other.id}, which works on the same paths"
            if r["reason"] != why:
                sup.store.update_task(job, r["task"], reason=why)
            continue
        if launch_builder(sup, job, r, tdef):
            capacity -= 1
            active.append(tdef)


def launch_builder(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> bool:
    from pilothouse.core import policy
    from pilothouse.core.gates import run_setup
    from pilothouse.core.worktrees import create_worktree, head

    tid = r["task"]
    try:
        choice = policy.choose_worker(sup.project, tdef, lambda p: _availability(sup, p), mode="code",
                                      default=sup.default_provider)
    except UserError as exc:
        stop_task(sup.store, job, tid, str(exc), kind="setup_failed")
        return False
    if choice.waiting or not choice.provider:
        sup.store.set_task(job, tid, "waiting", choice.why)
        return False
    started = time.monotonic()
    try:
        if r["worktree"] and Path(r["worktree"]).is_dir():
            path, branch = Path(r["worktree"]), r["branch"]
        else:
            base_ref = sup.good_head or sup.project.integration_branch
            path, branch = create_worktree(sup.layout, job, tid, base_ref, reuse=True)
    except UserError as exc:
        stop_task(sup.store, job, tid, str(exc), kind="worktree_failed")
        return False
    worktree_ms = round((time.monotonic() - started) * 1000, 1)
    if sup.project.setup and not r["worktree"]:
        from pilothouse.core import stops

        failed = run_setup(sup.project, path)
        if failed is not None:
            d = stops.after_gate(failed.to_dict(), counters(r), setup=True)
            stop_task(sup.store, job, tid, d.reason, kind=d.kind or "setup_failed", evidence=d.evidence)
            return False
    base = head(path)
    c = counters(r)
    c.setdefault("base", base)
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=tid, role="builder", provider=choice.provider,
                         mode="code", workdir=str(path), task_text=L.build_text(job, tdef),
                         attempt=int(r["attempt"]) + 1, model=choice.model, scenario=sup.project.sim_scenario)
    c["builder_run"] = launch.run_id
    L.start(sup, launch, task_state="running", reason=choice.why,
            fields={"attempt": launch.attempt, "provider": choice.provider, "model": choice.model,
                    "branch": branch, "worktree": str(path), "commit_sha": base, "started_at": utc_now_iso(),
                    "session_id": None, "review_round": 0, "counters": c},
            event_extra={"worktree_ms": worktree_ms})
    return True


def _availability(sup: Supervisor, provider: str) -> Any:
    from pilothouse.core import quota

    return quota.availability(sup.layout, provider, conn=sup.conn)


def resume_builder(sup: Supervisor, job: str, r: sqlite3.Row, text: str, reason: str,
                   counters_update: dict[str, Any] | None = None, state_fields: dict[str, Any] | None = None) -> bool:
    """The same builder continues its own session with `text` (findings, gate output, a hint)."""
    c = counters(r)
    if not r["session_id"]:
        return False
    c.update(counters_update or {})
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=r["task"], role="builder",
                         provider=r["provider"], mode="resume", workdir=r["worktree"], task_text=text,
                         attempt=int(r["attempt"]), model=r["model"], session_id=r["session_id"],
                         resume_of=c.get("builder_run"), scenario=sup.project.sim_scenario)
    c["builder_run"] = launch.run_id
    L.start(sup, launch, task_state="running", reason=reason, fields={"counters": c, **(state_fields or {})})
    return True


# --- after the builder -----------------------------------------------------------------------

def builder_done(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any, run: sqlite3.Row) -> None:
    from pilothouse.core import stops
    from pilothouse.core.worktrees import GitError, commit_all, head

    tid = r["task"]
    v = L.verdict_of(run)
    session = v.get("session_id") or r["session_id"]
    c = counters(r)
    resumed = run["mode"] == "resume"
    commit: str | None = None
    if stops.classify_verdict(v) == "ok":
        try:
            commit_all(r["worktree"], f"{tid}: {tdef.title}\n\njob: {job}\ntask: {tid}\nrun: {run['run_id']}")
            now = head(r["worktree"])
        except (GitError, OSError) as exc:
            stop_task(sup.store, job, tid, f"cannot commit the builder's work: {exc}", kind="worker_crashed",
                      evidence={"run": run["run_id"], "log": run["log"]})
            return
        # on a first run, the attempt's base is recorded in commit_sha: no move means no commit
        commit = now if (resumed or now != r["commit_sha"]) else None
    d = stops.after_builder(v, c, commit=commit, last_submitted=r["commit_sha"] if resumed else None,
                            log=run["log"])
    if d.action == stops.PROCEED:
        assert commit is not None
        sup.store.set_task(job, tid, "gating", f"{d.reason} ({v.get('verdict')})", commit_sha=commit,
                           session_id=session, activity=None, counters=d.counters)
    elif d.action == stops.WAIT:
        # a usage limit is not a failure: the attempt is given back and the task waits
        sup.store.set_task(job, tid, "waiting", d.reason, attempt=max(0, int(r["attempt"]) - 1),
                           session_id=session, counters=d.counters)
    elif d.action == stops.RERUN:
        sup.store.set_task(job, tid, "ready", d.reason, counters=d.counters)
    else:
        stop_task(sup.store, job, tid, d.reason, kind=d.kind or "worker_crashed", evidence=d.evidence,
                  counters=d.counters, session_id=session)


def start_gate(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> None:
    from pilothouse.core.gates import run_gate

    key = ("gate", job, r["task"])
    if key in sup.inflight:
        return
    level = tdef.gate_level or "fast"
    project, cwd = sup.project, r["worktree"]
    sup.events.append("gate.started", job=job, task=r["task"], data={"level": level, "where": "worktree",
                                                                     "command": project.gates.get(level)})
    sup.work(key, lambda: run_gate(project, level, cwd),
             lambda res, exc: gate_done(sup, job, r["task"], level, res, exc))


def gate_done(sup: Supervisor, job: str, tid: str, level: str, res: Any, exc: BaseException | None) -> None:
    from pilothouse.core import stops

    r = sup.store.task(job, tid)
    if r is None or r["state"] != "gating":
        return
    gate = res.to_dict() if res is not None else {"level": level, "passed": False, "command": "",
                                                   "reason": f"the gate crashed: {exc!r}", "output_tail": ""}
    tail = str(gate.get("output_tail") or "")[-1500:]
    sup.events.append("gate.finished", job=job, task=tid, data={
        "level": level, "passed": bool(gate.get("passed")), "where": "worktree", "reason": gate.get("reason"),
        "output_tail": tail, "exit_code": gate.get("exit_code"), "duration_s": gate.get("duration_s")})
    d = stops.after_gate(gate, counters(r))
    if d.action == stops.PROCEED:
        sup.store.update_task(job, tid, counters=d.counters)
        review.after_gate(sup, job, sup.store.task(job, tid))  # type: ignore[arg-type]
        return
    if d.action == stops.RESUME and resume_builder(sup, job, r, d.feedback or "", d.reason, d.counters):
        return
    stop_task(sup.store, job, tid, d.reason, kind=d.kind or "gate_failed", evidence=d.evidence or {
        "command": gate.get("command"), "output_tail": tail, "level": level}, counters=d.counters)


def start_merge(sup: Supervisor, job: str, r: sqlite3.Row, tdef: Any) -> None:
    from pilothouse.core.integration import merge_task

    tid = r["task"]
    key = ("merge", job, tid)
    if key in sup.inflight:
        return
    if r["state"] == "approved":
        # the intent is recorded before git moves, so a restart redoes (idempotently) what it finds here
        sup.store.set_task(job, tid, "merging", f"merging {r['branch']} into {sup.project.integration_branch}")
    layout, project, branch = sup.layout, sup.project, r["branch"]
    message = f"Merge {tid}: {tdef.title}\n\njob: {job}\ntask: {tid}\nbranch: {branch}"
    sup.work(key, lambda: merge_task(layout, project, branch, message),
             lambda res, exc: merge_done(sup, job, tid, res, exc))


def merge_done(sup: Supervisor, job: str, tid: str, res: Any, exc: BaseException | None) -> None:
    r = sup.store.task(job, tid)
    if r is None or r["state"] != "merging":
        return
    if res is None:
        sup.events.append("merge.finished", job=job, task=tid, data={"ok": False, "reason": repr(exc)})
        stop_task(sup.store, job, tid, f"merge failed: {exc}", kind="merge_failed")
        return
    data = res.to_dict()
    if data.get("gate"):
        data["gate"] = {k: data["gate"].get(k) for k in ("level", "passed", "reason", "duration_s")}
    sup.events.append("merge.finished", job=job, task=tid, data=data)
    if res.ok:
        sup.good_head = res.merged_sha if not res.already_merged else integration_good_head(sup)
        sup.store.set_task(job, tid, "done", "merged" if not res.already_merged else "already merged",
                           merged_sha=res.merged_sha)
        return
    sup.events.append("merge.rolled_back", job=job, task=tid,
                      data={"previous_sha": res.previous_sha, "reason": res.reason, "conflicts": res.conflicts})
    evidence = {"conflicts": res.conflicts or []}
    if res.gate is not None:
        evidence.update(command=res.gate.command, output_tail=res.gate.output_tail[-1500:])
    stop_task(sup.store, job, tid, res.reason or "merge failed",
              kind="merge_conflict" if res.conflicts else "merge_failed", evidence=evidence)


def integrate_job(sup: Supervisor, job: str) -> None:
    """`pilothouse integrate`: merge what is approved, nothing else."""
    defs = _defs(sup)
    for r in sup.store.tasks(job):
        if r["state"] in ("approved", "merging") and (job, r["task"]) in defs:
            start_merge(sup, job, r, defs[(job, r["task"])])
