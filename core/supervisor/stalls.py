"""A job that cannot go on for a reason only the operator can fix (no coordinator configured, a
stale integration checkout, a setting it cannot use) is a problem, never a silent stall.

The job is blocked with the reason and one job-level `cannot_proceed` problem says what to fix.
Every pass tries the job again, so fixing the cause is enough: the first pass that gets through
closes the problem and the job goes on (a `retry` reply only makes that pass come sooner).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor

KIND = "cannot_proceed"
PREFIX = "cannot go on: "


def stalled(sup: Supervisor, job: str, message: str) -> None:
    """Record that `job` cannot go on because of `message` (said once, however often it recurs)."""
    from pilothouse.core.stops import problems

    reason = PREFIX + message
    row = sup.store.job(job)
    if row is not None and (row["state"] != "blocked" or row["reason"] != reason):
        sup.store.set_job(job, "job.blocked", reason=reason, state="blocked")
        sup.log.warning("job %s %s", job, reason)
    problems.open_problem(sup.layout, job, None, KIND,
                          f"{message} — the job goes on by itself once this is fixed",
                          {"error": message}, conn=sup.conn, log=sup.events)


def cleared(sup: Supervisor, job: str) -> None:
    """`job` got through a pass: its cannot_proceed problem closes and a job still blocked by it
    is unblocked."""
    from pilothouse.core.stops import problems

    codes = [r["code"] for r in sup.conn.execute(
        "SELECT code FROM problems WHERE job=? AND task IS NULL AND kind=? AND state!='closed'", (job, KIND))]
    for code in codes:
        problems.close_problem(sup.layout, code, "fixed: the job went on", conn=sup.conn, log=sup.events)
    row = sup.store.job(job)
    if row is not None and row["state"] == "blocked" and str(row["reason"] or "").startswith(PREFIX):
        sup.store.set_job(job, None, reason="going on: what stopped it is fixed",
                          state="running" if row["planned_revision"] else "created")
