"""Getting out of a bad job: `job cancel` and `job delete`.

Both run while no supervisor does (the command stops it first and starts it again after), so the
single writer of job and task state is, for that moment, this module. Cancelling stops the job's
runs, closes its problems and marks what was left cancelled; its commits stay on their ph/
branches and its worktrees stay for inspection. Deleting also removes those worktrees and
branches (its integration line too), the job's record and its rows; what was shipped is on the
base branch and stays.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog, utc_now_iso
from pilothouse.core.supervisor.state import TERMINAL, StateStore

CANCELLED = "cancelled by the operator"


def _running_runs(conn: sqlite3.Connection, job: str) -> list[sqlite3.Row]:
    return list(conn.execute("SELECT * FROM runs WHERE job=? AND state!='finished'", (job,)))


def cancel_job(layout: RepoLayout, name: str) -> dict[str, Any]:
    """Stop the job's runs, close its problems, cancel its open tasks and the job itself.
    Returns what was done: {runs, tasks, problems, already}."""
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.stops import problems
    from pilothouse.core.supervisor import control

    job = load_job(layout, name)
    conn = store.connect(layout.state_db)
    events = EventLog(layout.events)
    try:
        st = StateStore(layout, conn, events)
        row = st.ensure_job(job.name, job.revision)
        stopped = []
        for run in _running_runs(conn, job.name):
            launch = runs.read_spec(layout, run["run_id"])
            if run["pid"] is not None or (launch is not None and launch.executor != "local"):
                control.abort_run(layout, run["run_id"])  # a cluster run has no pid here: its actor is asked
            verdict = runs.read_verdict(layout, run["run_id"], run["provider"]) or \
                runs.synth_verdict(layout, run, f"the job was {CANCELLED}")
            runs.finish_run(conn, events, run, verdict)
            stopped.append(run["run_id"])
        tasks = []
        for t in st.tasks(job.name):
            if t["state"] not in TERMINAL:
                st.set_task(job.name, t["task"], "cancelled", f"the job was {CANCELLED}", activity=None)
                tasks.append(t["task"])
        closed = []
        for p in problems.list_problems(layout, True, job=job.name, conn=conn):
            problems.close_problem(layout, p.code, f"the job was {CANCELLED}", conn=conn, log=events)
            closed.append(p.code)
        already = row["state"] == "cancelled"
        if not already:
            # planned up to its revision: the supervisor leaves it be until a correction (job update)
            st.set_job(job.name, "job.cancelled", reason=f"{CANCELLED}", state="cancelled",
                       finished_at=utc_now_iso(), planned_revision=max(row["planned_revision"], job.revision),
                       event_data={"runs": stopped, "tasks": tasks, "problems": closed})
            from pilothouse.core.records.jobs import Outcome, record_outcome

            record_outcome(layout, job.name, Outcome(state="cancelled", revision=job.revision, at=utc_now_iso()))
        return {"runs": stopped, "tasks": tasks, "problems": closed, "already": already}
    finally:
        conn.close()


def job_leftovers(layout: RepoLayout, name: str) -> dict[str, list[str]]:
    """What `job delete` would remove: the job's worktrees, its ph/<job>/ branches and its
    integration line."""
    from pilothouse.core.git.integration import job_line
    from pilothouse.core.git.worktrees import branch_exists, git, list_worktrees
    from pilothouse.core.records.project import load_project

    worktrees = [str(wt["path"]) for wt in list_worktrees(layout) if wt["job"] == name]
    out = git(layout.root, "for-each-ref", "--format=%(refname:short)", f"refs/heads/ph/{name}/")
    branches = [b for b in out.splitlines() if b]
    try:
        line = job_line(load_project(layout), name)
    except Exception:  # noqa: BLE001 - an unreadable project.yaml: the ph/ branches are still the job's
        line = None
    if line and branch_exists(layout.root, line):
        branches.append(line)
    return {"worktrees": worktrees, "branches": branches}


def delete_job(layout: RepoLayout, name: str) -> dict[str, Any]:
    """Cancel the job, then remove its worktrees, branches, task definitions, record and rows."""
    from pilothouse.core.git.worktrees import git_run, remove_worktree
    from pilothouse.core.records.jobs import remove_job
    from pilothouse.core.records.taskgraph import save_tasks

    cancelled = cancel_job(layout, name)
    left = job_leftovers(layout, name)
    for path in left["worktrees"]:
        remove_worktree(layout, path, force=True)  # the operator confirmed: its scratch goes too
    kept = []
    for branch in left["branches"]:
        # a branch the operator checked out somewhere of their own stays: that checkout is theirs
        if git_run(layout.root, "branch", "-D", branch).returncode != 0:
            kept.append(branch)
    if layout.tasks_yaml.exists():
        save_tasks(layout, [], replace_job=name)
    conn = store.connect(layout.state_db)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            codes = [r["code"] for r in conn.execute("SELECT code FROM problems WHERE job=?", (name,))]
            conn.executemany("DELETE FROM replies WHERE code=?", [(c,) for c in codes])
            for table in ("problems", "runs", "tasks", "jobs_state"):
                conn.execute(f"DELETE FROM {table} WHERE job=?", (name,))  # noqa: S608 - fixed names
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    remove_job(layout, name)
    left["branches"] = [b for b in left["branches"] if b not in kept]
    EventLog(layout.events).append("job.deleted", job=name, data={**left, "kept": kept,
                                                                  "reason": "deleted by the operator"})
    return {**cancelled, **left, "kept": kept}
