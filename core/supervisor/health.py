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
            if os.stat(layout.state_db).st_size > 0:
                return None
            what = "emptied (truncated to 0 bytes)"
        else:
            what = "replaced"
    except FileNotFoundError:
        what = "deleted"
    return f"{layout.state_db} was {what} while the supervisor ran, so it stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


def damaged_store(layout: RepoLayout, exc: BaseException) -> str | None:
    """The line to stop with when `exc` says the store itself is damaged, or None."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    if isinstance(exc, store.StateDisk):
        return f"{exc}; the supervisor stopped: `pilothouse job start` once it is fixed"
    if not isinstance(exc, store.StateDamaged) and not any(w in str(exc) for w in _DAMAGE):
        return None
    fault = store.disk_fault(layout.state_db, exc)
    if fault:  # a full or read-only disk: repairing the store would not help
        return f"{fault}; the supervisor stopped: `pilothouse job start` once it is fixed"
    return f"{layout.state_db} is damaged ({exc}), so the supervisor stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


# how long the supervisor goes on while another process holds state.db's write lock (each try
# waits the store's busy timeout first), before it stops and says who holds it
LOCK_GIVE_UP_S = 120.0
STOP_FILE = "supervisor.stopped"


def lock_held_too_long(sup: Supervisor, exc: sqlite3.OperationalError) -> str | None:
    """None while a held write lock is still worth waiting for (the next heartbeat tries again);
    the line to stop with once it has been held past LOCK_GIVE_UP_S. Other errors are raised."""
    import time

    if "locked" not in str(exc) and "busy" not in str(exc):
        raise exc
    now = time.monotonic()
    if sup._locked_since is None:
        sup._locked_since = now
    held = now - sup._locked_since + store.WRITE_WAIT_S
    holder = store.lock_holder(sup.layout.state_db)
    who = f" by {holder}" if holder else " by another process"
    if held < LOCK_GIVE_UP_S:
        sup.log.warning("%s is locked%s (%.0f s so far): trying again", sup.layout.state_db, who, held)
        sup._next_heartbeat = now + store.WRITE_WAIT_S
        return None
    return (f"{sup.layout.state_db} was locked{who} for over {held:.0f} s, so the supervisor stopped: end "
            "that process (or let it finish), then `pilothouse job start`")


def record_stop(layout: RepoLayout, why: str | None) -> None:
    """Keep why the supervisor stopped on its own beside the store (`job status` and the cockpit
    say it: the store may be the very thing that cannot be written); a clean stop removes it."""
    from pilothouse.providers.fsutil import atomic_write_text

    path = layout.runtime / STOP_FILE
    try:
        if why:
            atomic_write_text(path, why[:2000] + "\n", durable=False)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full disk: supervisor.log and the event already say it


def last_stop(layout: RepoLayout) -> str | None:
    """Why the last supervisor stopped on its own, or None (one line, bounded)."""
    from pilothouse.providers.userfile import read_text

    try:
        text = read_text(layout.runtime / STOP_FILE, STOP_FILE, 4096)
    except Exception:  # noqa: BLE001 - none, or not a file we wrote: nothing to say
        return None
    line = " ".join(text.split())
    return line or None


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
