"""What the records and the event log say state.db must hold, and what it has lost of it.

A store that opens and is of this version can still have lost work: replaced by an empty one, or
rebuilt from nothing by an older `job start`. The event log is the witness: a job whose record
exists and that the supervisor took up (it planned it, moved a task, opened a problem) has a row;
a problem opened and never closed has one too (when its job has a row). `job start` refuses a store that lost either, and
`maintain repair` and `check` name it, so work is never silently planned again from scratch.
The other way round, a job that its record or state.db knows has a log to read its story from
(`missing_log`).
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


def missing_log(layout: RepoLayout, job: str) -> str | None:
    """The line for a job the repository knows while its event log is gone, or None (the log is
    there, or the job is nobody's)."""
    import os

    known = None if os.path.lexists(layout.events) else _job_record(layout, job)
    if known is None:
        return None
    return (f"{layout.events} is missing, but job {job!r} exists ({known}): the log holds its history and "
            "nothing else does; put the file back (from a backup or a copy) to read the job's story")


def _job_record(layout: RepoLayout, job: str) -> str | None:
    """Where the repository says job `job` exists (its record in .ai/jobs/, or state.db), or None."""
    from pilothouse.core.records.jobs import validate_name
    from pilothouse.providers.errors import UserError

    try:
        record = layout.jobs_dir / f"{validate_name(job)}.json"
    except UserError:  # `why` asks of a task's name too: no job can have it
        return None
    if record.is_file():
        return str(record.relative_to(layout.root))
    try:
        conn = store.open_reader(layout.state_db)
        if conn is None:
            return None
        try:
            found = conn.execute("SELECT 1 FROM jobs_state WHERE job=?", (job,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:  # a store that cannot be read witnesses nothing here; `job status` says why
        return None
    return str(layout.state_db.relative_to(layout.root)) if found else None
