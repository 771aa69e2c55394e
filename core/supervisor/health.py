"""What keeps the supervisor or one job from making progress, said instead of stalling.

A job that cannot go on for a reason only the operator can fix (no coordinator configured, a
stale integration checkout, a setting it cannot use) is blocked with one job-level
`cannot_proceed` problem saying what to fix. Every pass tries the job again, so fixing the cause
is enough: the first pass that gets through closes the problem (a `retry` reply only makes that
pass come sooner).

What stops the supervisor itself — its store deleted, replaced or damaged under it, a full or
read-only disk — ends it with one line saying what to run. Lines of the event log that are not
events are counted once at its start.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor

_DAMAGE = ("malformed", "not a database", "no such table", "disk I/O error")


def store_identity(layout: RepoLayout) -> tuple[int, int]:
    st = os.stat(layout.state_db)
    return st.st_dev, st.st_ino


def lost_store(layout: RepoLayout, identity: tuple[int, int]) -> str | None:
    """Why the store the supervisor opened is no longer the repository's, or None. Anything it
    wrote next would land in a file nobody reads."""
    try:
        if store_identity(layout) == identity:
            return None
        what = "replaced"
    except FileNotFoundError:
        what = "deleted"
    return f"{layout.state_db} was {what} while the supervisor ran, so it stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


def damaged_store(layout: RepoLayout, exc: BaseException) -> str | None:
    """The line to stop with when `exc` says the store itself is damaged, or None."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    if not isinstance(exc, store.StateDamaged) and not any(w in str(exc) for w in _DAMAGE):
        return None
    return f"{layout.state_db} is damaged ({exc}), so the supervisor stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


def unreadable_lines(layout: RepoLayout, data: dict[str, Any]) -> str | None:
    """Count the log's lines that are not events (every reader skips them) into `data`; the
    sentence saying so, or None. Nothing in the log's content may keep a supervisor from starting."""
    skipped, first, notice = skipped_lines(layout)
    if skipped:
        data["skipped_lines"] = skipped
    return notice


def skipped_lines(layout: RepoLayout) -> tuple[int, str | None, str | None]:
    """(how many lines of the log are not events, where the first is, the sentence saying so).
    The count comes with the log's index, so a long log is read once, not at every start."""
    from pilothouse.core.state.event_index import EventIndex, IndexUnavailable
    from pilothouse.core.state.events import EventTailer

    try:
        with EventIndex(layout.events) as index:
            index.catch_up()
            return index.skipped, index.first_skip, index.skip_notice()
    except IndexUnavailable:
        tailer = EventTailer(layout.events)
        for _ in tailer.iter_new():
            pass
        return tailer.skipped, tailer.first_skip, tailer.skip_notice()


def keep_event_index(layout: RepoLayout) -> None:
    """Bring the log's index up to date (the supervisor does it at each heartbeat, off its loop)."""
    from pilothouse.core.state.event_index import EventIndex, IndexUnavailable

    try:
        with EventIndex(layout.events) as index:
            index.catch_up()
    except IndexUnavailable:
        pass  # a read-only runtime folder: readers read the log whole, as before


def exit_on_disk_error(exc: Exception) -> int:
    """A full or read-only disk ends the supervisor with one line naming the path (exit 1);
    anything else is a bug and is raised again with its traceback."""
    from pilothouse.providers.errors import disk_error_line

    line = disk_error_line(exc)
    if line is None:
        raise exc
    print(f"pilothouse: {line}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------- a job that cannot go on

KIND = "cannot_proceed"
PREFIX = "cannot go on: "


# a job-level stop that goes away by itself once fixed: a setting (cannot_proceed), or a role no
# allowed model has the capabilities for (model_unfit, named apart so it reads as what it is)
KINDS = (KIND, "model_unfit")


def stalled(sup: Supervisor, job: str, message: str, kind: str = KIND) -> None:
    """Record that `job` cannot go on because of `message` (said once, however often it recurs)."""
    from pilothouse.core.stops import problems

    reason = PREFIX + message
    # the problem first, then the job blocked (and the other way round in `cleared`): a reader
    # (`job wait`) never sees the job blocked with no problem open, which it takes as the end
    problems.open_problem(sup.layout, job, None, kind,
                          f"{message} — the job goes on by itself once this is fixed",
                          {"error": message}, conn=sup.conn, log=sup.events)
    row = sup.store.job(job)
    if row is not None and (row["state"] != "blocked" or row["reason"] != reason):
        sup.store.set_job(job, "job.blocked", reason=reason, state="blocked")
        sup.log.warning("job %s %s", job, reason)


def cleared(sup: Supervisor, job: str) -> None:
    """`job` got through a pass: its cannot_proceed problem closes and a job still blocked by it
    is unblocked."""
    from pilothouse.core.stops import problems

    row = sup.store.job(job)
    if row is not None and row["state"] == "blocked" and str(row["reason"] or "").startswith(PREFIX):
        sup.store.set_job(job, None, reason="going on: what stopped it is fixed",
                          state="running" if row["planned_revision"] else "created")
    codes = [r["code"] for r in sup.conn.execute(
        "SELECT code FROM problems WHERE job=? AND task IS NULL AND kind IN (?, ?) AND state!='closed'",
        (job, *KINDS))]
    for code in codes:
        problems.close_problem(sup.layout, code, "fixed: the job went on", conn=sup.conn, log=sup.events)
