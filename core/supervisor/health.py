"""What keeps the supervisor or one job from making progress, said instead of stalling.

A job that cannot go on for a reason only the operator can fix (no coordinator configured, a
stale integration checkout, a setting it cannot use) is blocked with one job-level
`cannot_proceed` problem saying what to fix. Every pass tries the job again, so fixing the cause
is enough: the first pass that gets through closes the problem (a `retry` reply only makes that
pass come sooner).

What stops the supervisor itself — its store deleted, replaced or damaged under it, a full or
read-only disk — ends it with one line saying what to run. Lines of the event log that are not
events are counted once at its start. SupervisorLease holds the supervisor's lock, its row and its
heartbeat, where those checks are made.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import utc_now_iso
from pilothouse.core.supervisor.dispatches import HEARTBEAT_S
from pilothouse.providers.errors import UserError

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


class SupervisorRunning(UserError):
    pass


def lock_path(layout: RepoLayout) -> Path:
    return layout.runtime / "supervisor.lock"


class SupervisorLease:
    """The supervisor's hold on its repository (core/supervisor/loop.py's Supervisor has these):
    one supervisor per repository (an flock on .ai/runtime/supervisor.lock that also names its
    holder, readable without the store), its row in state.db, its heartbeat, and noticing that the
    store was deleted or replaced under it."""

    # --- one per repository --------------------------------------------------------------------
    def acquire(self: Supervisor) -> None:
        path = lock_path(self.layout)
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            row = self.conn.execute("SELECT * FROM supervisor WHERE id=1").fetchone()
            who = f" (pid {row['pid']}, heartbeat {row['heartbeat_at']})" if row else ""
            raise SupervisorRunning(f"a supervisor is already running for {self.layout.root}{who}: "
                                    "`pilothouse job stop` stops it") from None
        self._lock_fh = fh
        record_stop(self.layout, None)  # why the last one stopped is no longer the news
        now = utc_now_iso()
        pid = os.getpid()
        # who holds the lock, readable without the store: `job stop` finds us even if state.db is damaged
        fh.truncate(0)
        fh.write(f"{pid} {runs.pid_start(pid)}\n")
        fh.flush()
        self.conn.execute("INSERT INTO supervisor(id, pid, pid_start, started_at, heartbeat_at, stopped_at)"
                          " VALUES (1, ?, ?, ?, ?, NULL) ON CONFLICT(id) DO UPDATE SET pid=excluded.pid,"
                          " pid_start=excluded.pid_start, started_at=excluded.started_at,"
                          " heartbeat_at=excluded.heartbeat_at, stopped_at=NULL",
                          (pid, runs.pid_start(pid), now, now))
        data: dict[str, Any] = {"pid": pid, "max_workers": self.max_workers}
        notice = unreadable_lines(self.layout, data)
        self.events.append("supervisor.started", data=data)
        self._next_heartbeat = time.monotonic() + HEARTBEAT_S
        self.log.info("supervisor started (pid %s) for %s", pid, self.layout.root)
        if notice:
            self.log.warning("%s", notice)

    def release(self: Supervisor) -> None:
        if self._lock_fh is None:
            return
        try:
            self.conn.execute("UPDATE supervisor SET stopped_at=? WHERE id=1 AND pid=?",
                              (utc_now_iso(), os.getpid()))
        except sqlite3.Error:  # locked or gone: its lock (released below) is what says it stopped
            pass
        data: dict[str, Any] = {"pid": os.getpid(), "running_dispatches": sorted(self.live_runs())}
        if self.lost:
            data["error"] = self.lost
        record_stop(self.layout, self.lost)
        self.events.append("supervisor.stopped", data=data)
        self.log.info("supervisor stopped")
        fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        self._lock_fh.close()
        self._lock_fh = None

    def heartbeat(self: Supervisor) -> None:
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + HEARTBEAT_S
        try:
            self.conn.execute("UPDATE supervisor SET heartbeat_at=? WHERE id=1", (utc_now_iso(),))
        except sqlite3.OperationalError as exc:
            # another process holds the store's write lock: wait it out a while, then stop saying who
            self.lost = lock_held_too_long(self, exc)
            if self.lost:
                self.log.error("%s", self.lost)
                self.stopping = True
            return
        self._locked_since = None
        self.events.append("supervisor.heartbeat", data={"pid": os.getpid(), "runs": len(self.live_runs()),
                                                         "inflight": len(self.inflight)})
        # keep the log's index a heartbeat behind at most, so `why` and `events` never index much
        self.work(("event-index",), lambda: keep_event_index(self.layout), lambda _r, _e: None)

    def store_lost(self: Supervisor) -> bool:
        """Whether state.db was deleted or replaced under this supervisor (then it stops)."""
        self.lost = self.lost or lost_store(self.layout, self._store_id)
        if self.lost:
            self.log.error("%s", self.lost)
            self.stopping = True
        return self.lost is not None
