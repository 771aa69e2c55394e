"""Launching builders: which ready tasks may start, and starting them.

A ready task launches when a worker slot is free and no active task writes what it writes (a
HOTSPOT, or a task writing a project hotspot, shares none of its paths at all). The slow part of
a launch — `git worktree add` and the project's setup commands — runs in a thread, so the loop
keeps serving other tasks; the launch is then recorded and spawned back in the loop.
"""

from __future__ import annotations

import time
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.state.events import utc_now_iso
from pilothouse.core.supervisor import launch as L
from pilothouse.core.supervisor.context import job_scenario, policy_of
from pilothouse.core.supervisor.state import ACTIVE, counters, stop_task
from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor.loop import Supervisor


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or fnmatch(a, b) or fnmatch(b, a)


def _hot(sup: Any, t: Any) -> bool:
    return bool(t.kind == "HOTSPOT" or any(_overlap(w, h) for w in t.expected_paths.write
                                            for h in sup.project.hotspots))


def conflict(sup: Any, t: Any, others: list[Any]) -> Any | None:
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
    from pilothouse.core.supervisor.context import task_defs

    defs = task_defs(sup)
    capacity = sup.max_workers - sup.busy_count() - len(sup.preparing)
    marks = ",".join("?" * len(ACTIVE))
    active = [defs[(r["job"], r["task"])] for r in sup.conn.execute(
        f"SELECT job, task FROM tasks WHERE state IN ({marks})", ACTIVE) if (r["job"], r["task"]) in defs]
    active += list(sup.preparing.values())
    for job, r, tdef in candidates:
        if capacity <= 0:
            return
        if r is None or r["state"] != "ready" or (job, r["task"]) in sup.preparing:
            continue
        if sup.project.setup and job not in sup.setup_proven and any(j == job for j, _ in sup.preparing):
            # until one worktree of the job got through `setup:`, try one at a time: a setup that
            # fails fails alike everywhere, and two alike failures hold the job (core.holds)
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
    """Start a fresh builder for a ready task; True when a slot is now taken."""
    from pilothouse.core.stops import policy

    tid = r["task"]
    try:
        project, default = policy_of(sup, job)
        choice = policy.choose_worker(project, tdef, lambda p: _availability(sup, p), mode="code",
                                      default=default, capable=policy.capability_gap)
    except policy.ModelUnfit as exc:
        stop_task(sup.store, job, tid, str(exc), kind="model_unfit", evidence={"gaps": exc.gaps})
        return False
    except UserError as exc:
        stop_task(sup.store, job, tid, str(exc), kind="setup_failed")
        return False
    if choice.waiting or not choice.provider:
        c = counters(r)
        c["wait_for"] = sorted({x["provider"] for x in choice.considered if x.get("provider")}
                               or ({default[0]} if default else set()))
        if choice.next_check_at is not None:
            sup.wake_at(choice.next_check_at.timestamp())
        sup.store.set_task(job, tid, "waiting", choice.why, counters=c)
        return False
    if r["worktree"] and Path(r["worktree"]).is_dir():
        _spawn_builder(sup, job, tid, tdef, choice, (Path(r["worktree"]), r["branch"], 0.0, "kept"))
        return True
    from pilothouse.core.git.integration import job_line

    if sup.good_heads.get(job) is None:
        from pilothouse.core.git.integration import ensure_integration_checkout
        from pilothouse.core.supervisor.context import integration_good_head

        try:
            # its `worktree prune` and `worktree add` beside a launch's `worktree add` (another job's)
            # could prune that checkout half-made: one at a time, as every checkout is made
            with sup.worktree_lock:
                ensure_integration_checkout(sup.layout, sup.project, job)  # creates the job's line on first use
        except UserError as exc:
            stop_task(sup.store, job, tid, str(exc), kind="worktree_failed")
            return False
        sup.good_heads[job] = integration_good_head(sup, job)
    base_ref = sup.good_heads.get(job) or job_line(sup.project, job)
    layout, project = sup.layout, sup.project
    sup.preparing[(job, tid)] = tdef
    # its worktree was removed (by the operator?): the branch it made still holds its commits
    own_branch = bool(r["branch"])

    def prepare() -> tuple[Path, str, float, Any, str]:
        from pilothouse.core.git.gates import run_setup
        from pilothouse.core.git.pool import checkout_for

        # git does not support concurrent `worktree add` in one repository: one at a time
        with sup.worktree_lock:
            started = time.monotonic()
            path, branch, how = checkout_for(layout, job, tid, base_ref, keep=project.worktree_pool, reuse=True,
                                             adopt=own_branch)
            took = time.monotonic() - started
        failed = run_setup(project, path) if project.setup else None
        return path, branch, took, failed, how

    def prepared(res: Any, exc: BaseException | None) -> None:
        sup.preparing.pop((job, tid), None)
        row = sup.store.task(job, tid)
        if row is None or row["state"] != "ready":
            return  # skipped or cancelled meanwhile; the worktree stays for inspection
        if exc is not None:
            stop_task(sup.store, job, tid, str(exc) if isinstance(exc, UserError) else
                      f"cannot create the worktree: {exc}", kind="worktree_failed")
            return
        path, branch, took, failed, how = res
        if failed is not None:
            from pilothouse.core.stops import rules as stops

            d = stops.after_gate(failed.to_dict(), counters(row), setup=True)
            stop_task(sup.store, job, tid, d.reason, kind=d.kind or "setup_failed", evidence=d.evidence,
                      worktree=str(path), branch=branch)
            return
        if project.setup:
            sup.setup_proven.add(job)
        _spawn_builder(sup, job, tid, tdef, choice, (path, branch, took, how))

    sup.work(("prepare", job, tid), prepare, prepared)
    return True


def _spawn_builder(sup: Supervisor, job: str, tid: str, tdef: Any, choice: Any,
                   where: tuple[Path, str, float, str]) -> None:
    from pilothouse.core.git.checkout import head

    path, branch, took, how = where
    r = sup.store.task(job, tid)
    assert r is not None
    # a fresh worktree sits on the base it was made from; a reused one may hold earlier commits
    good = sup.good_heads.get(job)
    base = good if (took and good and len(good) == 40) else head(path)
    c = counters(r)
    c.setdefault("base", base)
    # RESEARCH never writes: it explores (read-only) and its facts are the result
    mode = "explore" if tdef.kind == "RESEARCH" else "code"
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=tid, role="builder", provider=choice.provider,
                         mode=mode, workdir=str(path), task_text=L.build_text(job, tdef) + (
                             "note: resumed after a usage-limit wait (no attempt used)\n"
                             if c.get("quota_waits") else "") + _carried_text(c.pop("carried", None)),
                         attempt=int(r["attempt"]) + 1, model=choice.model, scenario=job_scenario(sup, job))
    c["builder_run"] = launch.run_id
    L.start(sup, launch, task_state="running", reason=choice.why,
            fields={"attempt": launch.attempt, "provider": choice.provider, "model": choice.model,
                    "branch": branch, "worktree": str(path), "commit_sha": base, "started_at": utc_now_iso(),
                    "session_id": None, "review_round": 0, "counters": c},
            event_extra={"worktree_ms": round(took * 1000, 1), "checkout": how})


def _carried_text(carried: Any) -> str:
    """What a resume that ended without a result was to answer, for the fresh builder in its place."""
    if not carried:
        return ""
    return ("\nAn earlier run of this task was to continue with the words below and ended without a result "
            "(its session is not continued); the work so far is in this checkout. Address them too:\n\n"
            + str(carried).rstrip() + "\n")


def _availability(sup: Supervisor, provider: str) -> Any:
    """For choosing a provider: available, or the first launch after a reset (it is the check)."""
    from pilothouse.core.stops import quota

    return quota.may_launch(sup.layout, provider, poll_s=sup.project.availability_poll_seconds, conn=sup.conn)


def resume_builder(sup: Supervisor, job: str, r: sqlite3.Row, text: str, reason: str,
                   counters_update: dict[str, Any] | None = None, state_fields: dict[str, Any] | None = None) -> bool:
    """The same builder continues its own session with `text` (findings, gate output, a hint)."""
    c = counters(r)
    if not r["session_id"] or not r["worktree"] or not Path(r["worktree"]).is_dir():
        return False  # no session, or its worktree is gone: the caller starts a fresh builder or stops
    c.update(counters_update or {})
    launch = runs.Launch(run_id=runs.new_run_id(), job=job, task=r["task"], role="builder",
                         provider=r["provider"], mode="resume", workdir=r["worktree"], task_text=text,
                         attempt=int(r["attempt"]), model=r["model"], session_id=r["session_id"],
                         resume_of=c.get("builder_run"), scenario=job_scenario(sup, job))
    c["builder_run"] = launch.run_id
    L.start(sup, launch, task_state="running", reason=reason, fields={"counters": c, **(state_fields or {})})
    return True
