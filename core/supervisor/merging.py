"""A task's work lands on its job's integration line: approved tasks merge as a train, a merged task's
checkout goes to the pool, and work that would carry a credential into a commit or a merge stops.

flow.py moves each task to `approved`; here the job's approved tasks merge together (one gate for
the batch, bisected when it fails: core/git/integration.merge_train), each one's result becomes
its state, and `pilothouse integrate` merges what is approved and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pilothouse.core.supervisor.context import integration_good_head, task_defs
from pilothouse.core.supervisor.state import stop_task
from pilothouse.providers.errors import describe

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.supervisor.loop import Supervisor


def secret_found(sup: Supervisor, job: str, tid: str, exc: Any, evidence: dict[str, Any],
                 session_id: str | None = None) -> None:
    """Work that would carry a credential into a commit or a merge: the task stops, its problem
    names file and line (never the value) and what fixes it."""
    from pilothouse.providers.scan import ALLOW_MARK, KEY_KIND

    where = evidence.get("worktree") or "the task's worktree"
    if any(h.kind == KEY_KIND for h in exc.hits):
        after = "a key that reached a file may be compromised: rotate it (pilothouse key set)"
    else:
        after = f"if it is no real credential (a test's fake token), mark its line {ALLOW_MARK}"
    stop_task(sup.store, job, tid, f"{exc}: take the credential out (hint the builder, or edit {where} and "
              f"retry); {after}",
              kind="secret_found", evidence={**evidence, "places": exc.places()},
              **({"session_id": session_id} if session_id else {}))


def start_merges(sup: Supervisor, job: str, tasks: list[tuple[sqlite3.Row, Any]]) -> None:
    """The job's approved tasks merge as one train (integration.merge_train): one gate for the batch,
    bisected when it fails. Tasks approved meanwhile take the next train."""
    from pilothouse.core.git.integration import job_line, merge_train

    key = ("merge", job)
    if not tasks or key in sup.inflight:
        return
    cars, names = [], []
    for r, tdef in tasks:
        tid, branch = r["task"], r["branch"]
        if r["state"] == "approved":
            # the intent is recorded before git moves, so a restart redoes (idempotently) what it finds here
            sup.store.set_task(job, tid, "merging", f"merging {branch} into {job_line(sup.project, job)}")
        cars.append((branch, f"Merge {tid}: {tdef.title}\n\njob: {job}\ntask: {tid}\nbranch: {branch}"))
        names.append(tid)
    layout, project = sup.layout, sup.project

    def done(results: list[Any] | None, exc: BaseException | None) -> None:
        from pilothouse.core.git.leaks import SecretInDiff

        for tid, res in zip(names, results or [None] * len(names), strict=True):
            if isinstance(res, SecretInDiff):
                merge_done(sup, job, tid, None, res)
            else:
                merge_done(sup, job, tid, res, exc)
        housekeeping(sup)

    sup.work(key, lambda: merge_train(layout, project, job, cars), done)


def housekeeping(sup: Supervisor) -> None:
    """git's own `maintenance run --auto` (packs loose objects once there are many), which the
    supervisor's git calls leave out (core/git/worktrees.SAFE_GIT): once per merge train, beside the
    work, at most one at a time. Each of a builder's commits and merges made its own otherwise."""
    from pilothouse.core.git.worktrees import git

    root = sup.layout.root
    sup.work(("housekeeping",), lambda: git(root, "maintenance", "run", "--auto", "--quiet", check=False),
             lambda _r, _e: None)


def merge_done(sup: Supervisor, job: str, tid: str, res: Any, exc: BaseException | None) -> None:
    r = sup.store.task(job, tid)
    if r is None or r["state"] != "merging":
        return
    if res is None:
        sup.events.append("merge.finished", job=job, task=tid, data={"ok": False, "reason": describe(exc)})
        from pilothouse.core.git.leaks import SecretInDiff

        if isinstance(exc, SecretInDiff):
            secret_found(sup, job, tid, exc, {"worktree": str(r["worktree"] or ""), "branch": r["branch"]})
            return
        stop_task(sup.store, job, tid, f"merge failed: {describe(exc)}", kind="merge_failed")
        return
    data = res.to_dict()
    if data.get("gate"):
        data["gate"] = {k: data["gate"].get(k) for k in ("level", "passed", "reason", "duration_s")}
    sup.events.append("merge.finished", job=job, task=tid, data=data)
    if res.ok:
        sup.good_heads[job] = res.merged_sha if not res.already_merged else integration_good_head(sup, job)
        sup.store.set_task(job, tid, "done", "merged" if not res.already_merged else "already merged",
                           merged_sha=res.merged_sha)
        if sup.project.worktree_pool > 0 and r["worktree"]:
            pool_checkout(sup, job, tid, r["worktree"])
        return
    sup.events.append("merge.rolled_back", job=job, task=tid,
                      data={"previous_sha": res.previous_sha, "reason": res.reason, "conflicts": res.conflicts})
    evidence = {"conflicts": res.conflicts or []}
    if res.gate is not None:
        evidence.update(command=res.gate.command, output_tail=res.gate.output_tail[-1500:])
    stop_task(sup.store, job, tid, res.reason or "merge failed",
              kind="merge_conflict" if res.conflicts else "merge_failed", evidence=evidence)


def pool_checkout(sup: Supervisor, job: str, tid: str, worktree: str) -> None:
    """The merged task's checkout goes to the pool for the next task (off the loop, one git at a time)."""
    from pilothouse.core.git.pool import release

    def move() -> bool:
        # under the lock the next launch takes too: the dependent waits for this checkout rather
        # than making a new one of the whole repository
        with sup.worktree_lock:
            return release(sup.layout, worktree, job, tid, sup.project.worktree_pool, base=sup.good_heads.get(job))

    sup.work(("pool", job, tid), move, lambda _r, _e: None)


def integrate_job(sup: Supervisor, job: str) -> None:
    """`pilothouse integrate`: merge what is approved, nothing else."""
    defs = task_defs(sup)
    start_merges(sup, job, [(r, defs[(job, r["task"])]) for r in sup.store.tasks(job)
                            if r["state"] in ("approved", "merging") and (job, r["task"]) in defs])
