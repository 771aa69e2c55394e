"""Job-level holds: reasons nothing new may launch for a job although its tasks are ready.

- its recorded tokens passed `budgets.job_tokens` (a `budget` problem says so);
- the same setup failure stopped two of its tasks (until the operator retries one of them).

The supervisor asks `launch_hold` before launching anything for a job; a hold never stops
runs already going, and the work so far is kept.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from pilothouse.core import budgets, problems
from pilothouse.core.events import EventLog
from pilothouse.core.layout import RepoLayout


def launch_hold(layout: RepoLayout, job: str, cap: int | None, *, now: datetime | None = None,
                conn: sqlite3.Connection | None = None, log: EventLog | None = None) -> str | None:
    """None when the job may launch, else why not (one line, for the event and `why`)."""
    held = problems.job_hold(layout, job, conn=conn)
    if held:
        return (f"held: the same setup failure stopped {len(held)} tasks ({', '.join(held)}); "
                f"fix the cause, then retry one of them (pilothouse problem act {held[0]} retry)")
    if cap is not None:
        problem = budgets.enforce(layout, job, cap, now=now, conn=conn, log=log)
        if problem is not None:
            return (f"held: job {job} used {problem.evidence.get('used_tokens')} tokens, past its budget of "
                    f"{problem.evidence.get('cap')}; raise budgets.job_tokens, then "
                    f"pilothouse problem act {problem.code} retry")
    return None
