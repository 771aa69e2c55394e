"""The supervisor's hold on its repository: one supervisor per repository (an flock on
.ai/runtime/supervisor.lock that also names its holder, readable without the store), its row in
state.db, its heartbeat, and noticing that the store was deleted or replaced under it."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path
from typing import IO, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import utc_now_iso
from pilothouse.core.supervisor import dispatches, health
from pilothouse.core.supervisor.dispatches import SupervisorRuns
from pilothouse.providers.errors import UserError

HEARTBEAT_S = dispatches.HEARTBEAT_S


class SupervisorRunning(UserError):
    pass


def lock_path(layout: RepoLayout) -> Path:
    return layout.runtime / "supervisor.lock"


class SupervisorLease(SupervisorRuns):
    """Supervisor's methods for its lock, its row and its heartbeat (core/supervisor/loop.py)."""

    _lock_fh: IO[str] | None
    _next_heartbeat: float
    _locked_since: float | None
    _store_id: Any
    lost: str | None
    stopping: bool

    # --- one per repository --------------------------------------------------------------------
    def acquire(self) -> None:
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
        health.record_stop(self.layout, None)  # why the last one stopped is no longer the news
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
        notice = health.unreadable_lines(self.layout, data)
        self.events.append("supervisor.started", data=data)
        self._next_heartbeat = time.monotonic() + HEARTBEAT_S
        self.log.info("supervisor started (pid %s) for %s", pid, self.layout.root)
        if notice:
            self.log.warning("%s", notice)

    def release(self) -> None:
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
        health.record_stop(self.layout, self.lost)
        self.events.append("supervisor.stopped", data=data)
        self.log.info("supervisor stopped")
        fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        self._lock_fh.close()
        self._lock_fh = None

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + HEARTBEAT_S
        try:
            self.conn.execute("UPDATE supervisor SET heartbeat_at=? WHERE id=1", (utc_now_iso(),))
        except sqlite3.OperationalError as exc:
            # another process holds the store's write lock: wait it out a while, then stop saying who
            self.lost = health.lock_held_too_long(self, exc)
            if self.lost:
                self.log.error("%s", self.lost)
                self.stopping = True
            return
        self._locked_since = None
        self.events.append("supervisor.heartbeat", data={"pid": os.getpid(), "runs": len(self.live_runs()),
                                                         "inflight": len(self.inflight)})
        # keep the log's index a heartbeat behind at most, so `why` and `events` never index much
        self.work(("event-index",), lambda: health.keep_event_index(self.layout), lambda _r, _e: None)

    def store_lost(self) -> bool:
        """Whether state.db was deleted or replaced under this supervisor (then it stops)."""
        self.lost = self.lost or health.lost_store(self.layout, self._store_id)
        if self.lost:
            self.log.error("%s", self.lost)
            self.stopping = True
        return self.lost is not None
