"""The task state machine (docs/contracts.md, "Task states") and the job's runtime state, as the supervisor writes them.

Every task state change is one SQLite transaction on the `tasks` table (plus whatever rows must
change with it, e.g. the run being launched) and one `task.state` event carrying the reason.
A change the machine does not allow raises: a supervisor bug must not silently corrupt a job.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog, utc_now_iso

ACTIVE = ("running", "gating", "reviewing", "approved", "merging")
TERMINAL = ("done", "skipped", "cancelled")
# tasks that occupy a worker slot
BUSY = ("running", "gating", "reviewing")

_ANY_OPEN = ("cancelled", "skipped", "stopped", "needs_replan", "waiting")
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "planned": ("ready", *_ANY_OPEN),
    "ready": ("running", "planned", *_ANY_OPEN),
    "running": ("gating", "running", "ready", "done", *_ANY_OPEN),  # done: a RESEARCH task (nothing to merge)
    "gating": ("reviewing", "approved", "running", *_ANY_OPEN),
    "reviewing": ("approved", "running", "reviewing", "gating", *_ANY_OPEN),
    "approved": ("merging", *_ANY_OPEN),
    "merging": ("done", "approved", *_ANY_OPEN),
    "waiting": ("ready", "running", "gating", "reviewing", "approved", *_ANY_OPEN),
    "stopped": ("planned", "ready", "running", "gating", "reviewing", "approved", "merging", "stopped",
                *_ANY_OPEN),
    "needs_replan": ("planned", "ready", *_ANY_OPEN),
    "done": (),
    "skipped": (),
    "cancelled": ("planned",),
}

_TASK_FIELDS = {"kind", "depends_on", "attempt", "review_round", "provider", "model", "run_id", "session_id",
                "branch", "worktree", "commit_sha", "merged_sha", "activity", "reason", "started_at", "counters"}
_JOB_FIELDS = {"state", "revision", "planned_revision", "coordinator", "reason", "finished_at"}


class IllegalTransition(RuntimeError):
    pass


class StateStore:
    """The supervisor's writes to state.db, each paired with its event."""

    def __init__(self, layout: RepoLayout, conn: sqlite3.Connection, events: EventLog) -> None:
        self.layout = layout
        self.conn = conn
        self.events = events
        # state changes made so far: a reconcile pass that moved something is followed by another
        # (a crashed run's task is ready again only after the pass that would have launched it)
        self.moves = 0

    # --- reads ---------------------------------------------------------------------------------
    def tasks(self, job: str) -> list[sqlite3.Row]:
        return list(self.conn.execute("SELECT * FROM tasks WHERE job=? ORDER BY rowid", (job,)))

    def task_states(self, job: str) -> list[tuple[str, str, str]]:
        """(task, state, depends_on) of each task of the job, in plan order: what a reconcile pass
        scans. Plain tuples of three columns: a full row of each of a 500-task job's tasks on every
        pass made the supervisor's cost per task grow with the job."""
        cur = self.conn.cursor()
        cur.row_factory = None
        return list(cur.execute("SELECT task, state, depends_on FROM tasks WHERE job=? ORDER BY rowid", (job,)))

    def task(self, job: str, task: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute("SELECT * FROM tasks WHERE job=? AND task=?",
                                                    (job, task)).fetchone()
        return row

    def job(self, job: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute("SELECT * FROM jobs_state WHERE job=?", (job,)).fetchone()
        return row

    def run(self, run_id: str | None) -> sqlite3.Row | None:
        if not run_id:
            return None
        row: sqlite3.Row | None = self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return row

    # --- writes --------------------------------------------------------------------------------
    def _txn(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                self.conn.execute(sql, tuple(params))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def set_task(self, job: str, task: str, state: str, reason: str, *,
                 also: Iterable[tuple[str, Sequence[Any]]] = (), event_data: dict[str, Any] | None = None,
                 **fields: Any) -> None:
        """Move a task to `state` (one transaction with `also`), then emit one task.state event."""
        row = self.task(job, task)
        if row is None:
            raise IllegalTransition(f"task {job}/{task} does not exist")
        if state not in TRANSITIONS[row["state"]]:
            raise IllegalTransition(f"task {job}/{task}: {row['state']} -> {state} is not allowed")
        cols = _task_columns(fields)
        sql = "UPDATE tasks SET state=?, reason=?, updated_at=?" + (f", {cols}" if cols else "") + \
            " WHERE job=? AND task=?"
        self._txn([(sql, (state, reason, utc_now_iso(), *fields.values(), job, task)), *also])
        self.moves += 1
        data = {"from": row["state"], "to": state, "reason": reason, **(event_data or {})}
        self.events.append("task.state", job=job, task=task, run=fields.get("run_id") or row["run_id"], data=data)

    def update_task(self, job: str, task: str, **fields: Any) -> None:
        """Change bookkeeping fields without a state change (no event: callers emit their own)."""
        cols = _task_columns(fields)
        self._txn([(f"UPDATE tasks SET {cols}, updated_at=? WHERE job=? AND task=?",
                    (*fields.values(), utc_now_iso(), job, task))])

    def add_tasks(self, job: str, entries: list[dict[str, Any]], revision: int) -> list[str]:
        """Insert planned tasks (a re-plan keeps tasks that already exist); returns the new ids."""
        now = utc_now_iso()
        existing = {r["task"] for r in self.tasks(job)}
        new = [e for e in entries if e["id"] not in existing]
        stmts: list[tuple[str, Sequence[Any]]] = [
            ("INSERT INTO tasks(job, task, state, kind, depends_on, reason, updated_at) VALUES (?,?,?,?,?,?,?)",
             (job, e["id"], "planned", e.get("kind") or "SAFE_PARALLEL", json.dumps(list(e.get("depends_on") or [])),
              f"planned in revision {revision}", now)) for e in new]
        self._txn(stmts)
        for e in new:
            self.events.append("task.state", job=job, task=e["id"],
                               data={"from": None, "to": "planned", "reason": f"planned in revision {revision}"})
        return [e["id"] for e in new]

    def ensure_job(self, job: str, revision: int) -> sqlite3.Row:
        now = utc_now_iso()
        self._txn([("INSERT OR IGNORE INTO jobs_state(job, state, revision, created_at, updated_at)"
                    " VALUES (?, 'created', ?, ?, ?)", (job, revision, now, now)),
                   ("UPDATE jobs_state SET revision=? WHERE job=? AND revision<?", (revision, job, revision))])
        row = self.job(job)
        assert row is not None
        return row

    def set_job(self, job: str, event: str | None, reason: str | None = None,
                event_data: dict[str, Any] | None = None, **fields: Any) -> None:
        """Change the job's runtime row (one transaction) and emit `event` (job.planned, …) if given."""
        bad = set(fields) - _JOB_FIELDS
        if bad:
            raise ValueError(f"unknown job fields {sorted(bad)}")
        if reason is not None:
            fields["reason"] = reason
        cols = ", ".join(f"{k}=?" for k in fields)
        self._txn([(f"UPDATE jobs_state SET {cols}, updated_at=? WHERE job=?",
                    (*fields.values(), utc_now_iso(), job))])
        if "state" in fields:
            self.moves += 1
            # every change of the job's state is a line of the log, even one no event of its own
            # names (the full gate, the combined review, work resumed): a replay of the log alone
            # shows the job as `job status` showed it then
            event = event or "job.state"
        if event:
            data = dict(event_data or {})
            if reason:
                data.setdefault("reason", reason)
            if "state" in fields:
                data.setdefault("state", fields["state"])
            self.events.append(event, job=job, data=data)


def counters(row: sqlite3.Row) -> dict[str, Any]:
    try:
        value = json.loads(row["counters"] or "{}")
    except (IndexError, KeyError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def stop_task(store: StateStore, job: str, task: str, reason: str, *, kind: str,
              evidence: dict[str, Any] | None = None, replies: Sequence[str] | None = None,
              **fields: Any) -> str | None:
    """Every stop goes through here: the task becomes `stopped` with its reason, and a problem the
    operator answers is opened (core.problems; `kind` picks the replies that fit unless given).
    Tasks that don't depend on this one keep going. Returns the problem's code."""
    from pilothouse.core.stops import problems

    evidence = dict(evidence or {})
    row = store.task(job, task)
    worktree = fields.get("worktree") or (row["worktree"] if row is not None else None)
    if worktree and "worktree" not in evidence:
        evidence["worktree"] = worktree  # where the operator looks, fixes, then answers retry
    store.set_task(job, task, "stopped", reason, activity=None,
                   event_data={"stop_kind": kind, "evidence": evidence}, **fields)
    problem = problems.open_problem(store.layout, job, task, kind, reason, evidence,
                                    list(replies) if replies is not None else None,
                                    conn=store.conn, log=store.events)
    return problem.code


def block_job(store: StateStore, job: str, reason: str, kind: str, summary: str | None = None,
              evidence: dict[str, Any] | None = None, replies: Sequence[str] | None = None) -> str:
    """The job waits for the operator: its problem opens first, then the job is blocked (one
    transaction each). Never the other way round: a waiter (`job wait`, the MCP job_wait) takes a
    blocked job with no open problem as the operator's turn with nothing to answer. Returns the
    problem's code."""
    from pilothouse.core.stops import problems

    problem = problems.open_problem(store.layout, job, None, kind, summary or reason, evidence,
                                    list(replies) if replies is not None else None,
                                    conn=store.conn, log=store.events)
    store.set_job(job, "job.blocked", reason=reason, state="blocked")
    return problem.code


def _task_columns(fields: dict[str, Any]) -> str:
    """Check bookkeeping fields (serialising `counters` in place) and return their SET clause."""
    bad = set(fields) - _TASK_FIELDS
    if bad:
        raise ValueError(f"unknown task fields {sorted(bad)}")
    if "counters" in fields and not isinstance(fields["counters"], str):
        fields["counters"] = json.dumps(fields["counters"])
    return ", ".join(f"{k}=?" for k in fields)
