"""Job-level holds: reasons nothing new may launch for a job although its tasks are ready.

- its recorded tokens passed `budgets.job_tokens` (a `budget` problem says so);
- the same setup failure stopped two of its tasks (until the operator retries one of them):
  "the same" is the same command failing with the same output tail once paths, durations,
  hashes and counts are masked (fingerprint.py).

The supervisor asks `launch_hold` before launching anything for a job; a hold never stops
runs already going, and the work so far is kept.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.stops import budgets
from pilothouse.core.stops.problems import _db, get_problem, job_hold


def launch_hold(layout: RepoLayout, job: str, cap: int | None, *, now: datetime | None = None,
                conn: sqlite3.Connection | None = None, log: EventLog | None = None,
                setup: bool = True) -> str | None:
    """None when the job may launch, else why not (one line, for the event and `why`).
    `setup=False`: for a launch that needs no worktree setup (the assigner), only the budget holds."""
    held = job_hold(layout, job, conn=conn) if setup else []
    if held:
        return (f"held: the same setup failure stopped {len(held)} tasks ({', '.join(held)}); "
                f"fix the cause, then retry one of them (pilothouse problem act {held[0]} retry)")
    if cap is None:
        budgets.lifted(layout, job, None, conn=conn, log=log)
    else:
        problem = budgets.enforce(layout, job, cap, now=now, conn=conn, log=log)
        if problem is not None:
            return (f"held: job {job} used {problem.evidence.get('used_tokens')} tokens, past its budget of "
                    f"{problem.evidence.get('cap')}; raise budgets.job_tokens, then "
                    f"pilothouse problem act {problem.code} retry")
    return None


def same_setup_failure(layout: RepoLayout, code: str, *, conn: sqlite3.Connection | None = None) -> list[str]:
    """Other open setup_failed problems of the job failing exactly like `code` (same fingerprint).

    When the operator retries one of them, the supervisor retries these with it: they were held
    for the same cause, which the operator just fixed.
    """
    with _db(layout, conn) as db:
        p = get_problem(layout, code, conn=db)
        fp = p.evidence.get("fingerprint")
        if p.kind != "setup_failed" or not fp:
            return []
        rows = db.execute("SELECT code, evidence FROM problems WHERE job = ? AND kind = 'setup_failed'"
                          " AND state = 'open' AND code != ?", (p.job, p.code)).fetchall()
    return [r["code"] for r in rows if json.loads(r["evidence"] or "{}").get("fingerprint") == fp]
