"""What the records and the event log say state.db must hold, and what it has lost of it.

A store that opens and is of this version can still have lost work: replaced by an empty one, or
rebuilt from nothing by an older `job start`. The event log is the witness: a job whose record
exists and that the supervisor took up (it planned it, moved a task, opened a problem) has a row;
a problem opened and never closed has one too (when its job has a row). `job start` refuses a store that lost either, and
`maintain repair` and `check` name it, so work is never silently planned again from scratch.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventTailer

# events only the supervisor writes about a job it has taken up (it has a jobs_state row by then)
_TAKEN_UP = ("job.planned", "job.blocked", "job.waiting", "job.accepted", "job.failed", "task.state")


def expected(layout: RepoLayout) -> tuple[set[str], dict[str, dict[str, Any]]]:
    """(the jobs the supervisor took up, the problems still open by code) according to the log."""
    taken: set[str] = set()
    opened: dict[str, dict[str, Any]] = {}
    if not layout.events.is_file():  # no log (or not one pilothouse wrote): it witnesses nothing
        return taken, opened
    for ev in EventTailer(layout.events).iter_new():
        etype, job, data = ev["type"], ev.get("job"), ev.get("data") or {}
        if not job:
            continue
        if etype in ("job.created", "job.deleted"):  # a name used again starts a new history
            taken.discard(job)
            for gone in [c for c, p in opened.items() if p["job"] == job]:
                opened.pop(gone)
            continue
        if etype in _TAKEN_UP:
            taken.add(job)
        code = data.get("code")
        if isinstance(code, str):
            if etype == "problem.opened":
                opened[code] = {"job": job, "task": ev.get("task")}
            elif etype == "problem.closed":
                opened.pop(code, None)
    return taken, opened


def lost(layout: RepoLayout) -> list[str]:
    """What the store lost that the records and the log say it holds, as phrases ("job demo", …);
    [] when it agrees. Raises StateDamaged when the store itself cannot be used."""
    from pilothouse.core.records.jobs import list_jobs

    conn = store.open_reader(layout.state_db)
    records = {j.name for j in list_jobs(layout)}
    taken, opened = expected(layout)
    taken &= records
    if conn is None:
        return [f"job {j}" for j in sorted(taken)]
    try:
        have_jobs = {r[0] for r in conn.execute("SELECT job FROM jobs_state")}
        have_problems = {r[0] for r in conn.execute("SELECT code FROM problems")}
    except sqlite3.Error as exc:
        raise store.unusable(layout.state_db, exc) from None
    finally:
        conn.close()
    out = [f"job {j}" for j in sorted(taken - have_jobs)]
    out += [f"open problem {c} ({p['job']})" for c, p in sorted(opened.items())
            if p["job"] in records and p["job"] in have_jobs and c not in have_problems]
    return out


def lost_line(layout: RepoLayout, missing: list[str]) -> str:
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    return (f"{layout.state_db} has lost what .ai/jobs/ and events.jsonl say it holds ({shown}): "
            f"{store.REPAIR}")


def require_consistent(layout: RepoLayout) -> None:
    """Raise (one line saying what to run) unless the store can be used and holds what the log says."""
    missing = lost(layout)
    if missing:
        raise store.StateDamaged(lost_line(layout, missing))

