"""Start, stop and inspect a repository's supervisor from another process (CLI, cockpit, demo).

`start` detaches the supervisor (`python -m pilothouse.core.supervisor.loop`, what `run --watch` runs)
from the caller: it runs in
its own session, reparented away from the caller, with stdio in `.ai/runtime/supervisor.log`,
so it survives the terminal. `stop` asks it to leave (SIGTERM); dispatches it launched keep
running and are adopted by the next supervisor.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import parse_ts
from pilothouse.providers.errors import UserError

START_TIMEOUT_S = 120.0  # a guard: a loaded machine can take a minute to start an interpreter and its imports
STOP_TIMEOUT_S = 30.0
ABORT_GRACE_S = 5.0


def _lock_held(layout: RepoLayout) -> bool:
    from pilothouse.providers.fsutil import lock_held

    return lock_held(layout.runtime / "supervisor.lock")


def _running_row(layout: RepoLayout) -> Any:
    """The supervisor row of the supervisor running now (its lock held, its process alive), or None."""
    if not _lock_held(layout):
        return None
    try:
        conn = store.connect(layout.state_db, readonly=True)
        try:
            row = conn.execute("SELECT * FROM supervisor WHERE id=1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        row = _lock_owner(layout)  # the store is gone or damaged: the lock file still names the holder
    if row is None or row["stopped_at"] or not runs.process_matches(row["pid"], row["pid_start"]):
        return None
    return row


def _lock_owner(layout: RepoLayout) -> dict[str, Any] | None:
    """{pid, pid_start, …} of the supervisor holding the lock, from the lock file it wrote."""
    try:
        pid, start = (layout.runtime / "supervisor.lock").read_text().split()[:2]
        return {"pid": int(pid), "pid_start": None if start == "None" else start, "started_at": "",
                "heartbeat_at": None, "stopped_at": None}
    except (OSError, ValueError):
        return None


def status(layout: RepoLayout) -> dict[str, Any] | None:
    """The running supervisor ({pid, started_at, heartbeat_at, heartbeat_age_s}), or None."""
    row = _running_row(layout)
    if row is None:
        return None
    from datetime import UTC, datetime

    beat = parse_ts(row["heartbeat_at"])
    age = round((datetime.now(UTC) - beat).total_seconds(), 1) if beat is not None else None
    return {"pid": row["pid"], "started_at": row["started_at"], "heartbeat_at": row["heartbeat_at"],
            "heartbeat_age_s": age}


def refuse_unconfined(project: Any) -> None:
    """Refuse to start a supervisor whose builders and gates could not be confined here: said once,
    before anything launches, rather than as a crashed builder per task (`job start`, `run --watch`,
    the cockpit)."""
    from pilothouse.providers import confine

    reason = confine.unconfined_reason(project.confinement)
    if reason is not None:
        raise UserError(f"refusing to start: builders and gates run in bubblewrap and {reason} ({confine.OPT_OUT})")


def start(layout: RepoLayout, max_workers: int | None = None) -> int:
    """Start the supervisor detached; returns its pid once it has announced itself."""
    current = status(layout)
    if current is not None:
        return int(current["pid"])
    from pilothouse.core.records.state_witness import require_consistent

    require_consistent(layout)  # said now, not after the start timeout
    layout.runtime.mkdir(parents=True, exist_ok=True)
    started = time.time()
    from pilothouse.providers.hostpython import host_env, python_argv

    # isolated: its cwd is the repository, into which workers' branches may have been merged
    argv = python_argv("-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root))
    if max_workers:
        argv += ["--max-workers", str(max_workers)]
    # the intermediate shell exits at once, so the supervisor is nobody's child (no zombie, no SIGHUP)
    cmd = " ".join(_quote(a) for a in argv) + f" </dev/null >>{_quote(str(layout.supervisor_log))} 2>&1 &"
    subprocess.run(["/bin/sh", "-c", cmd], cwd=layout.root, env=host_env(), start_new_session=True, check=True)
    pid = _wait_announced(layout, started, START_TIMEOUT_S)
    if pid is None:
        raise UserError(f"the supervisor did not start within {START_TIMEOUT_S:g}s: see {layout.supervisor_log}"
                        f"{_log_tail(layout)}")
    return pid


def _wait_announced(layout: RepoLayout, since: float, timeout: float) -> int | None:
    """The new supervisor's pid once its row is in the store, or None after `timeout` seconds.

    Woken by the runtime directory's changes (it takes the lock, writes its row, then appends
    supervisor.started), so a start costs no polling. The watcher is set up just after the spawn,
    well within the interpreter's own start-up; the one-second timeout wake-up bounds what a
    change slipping in before it could cost.
    """
    import threading

    from watchfiles import watch

    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)  # ends the watch exactly at the deadline
    timer.daemon = True
    timer.start()
    try:
        for _changes in watch(layout.runtime, debounce=20, step=10, stop_event=stop, rust_timeout=1000,
                              yield_on_timeout=True, recursive=False):
            current = status(layout)
            if current is not None and _started_after(current["started_at"], since):
                return int(current["pid"])
    finally:
        timer.cancel()
    return None


def _started_after(iso: str, t: float) -> bool:
    """`iso` is the new supervisor's start, not the row a dead one left behind."""
    at = parse_ts(iso)
    return at is not None and at.timestamp() >= t - 1.0


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _log_tail(layout: RepoLayout) -> str:
    try:
        lines = layout.supervisor_log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return (" — last line: " + lines[-1][-300:]) if lines else ""


def stop(layout: RepoLayout, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Ask the supervisor to stop and wait for it; False when none was running."""
    row = _running_row(layout)
    if row is None:
        return False
    pid, start_ticks = int(row["pid"]), row["pid_start"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if not runs.wait_gone(pid, start_ticks, timeout):
        os.kill(pid, signal.SIGKILL)
        runs.wait_gone(pid, start_ticks, 5.0)
    return True


def aborted_key(run_id: str) -> str:
    """The meta key that says the operator aborted this run."""
    return f"aborted:{run_id}"


def abort_run(layout: RepoLayout, run_id: str, grace: float = ABORT_GRACE_S) -> bool:
    """Interrupt one dispatch (SIGINT to its process group), kill it after `grace` seconds, wherever
    it runs (core/executor/). The supervisor sees it end and handles its verdict like any other;
    False if it wasn't running.
    """
    from pilothouse.core.executor.base import cancel_run

    conn = store.connect(layout.state_db, readonly=True)
    try:
        row = conn.execute("SELECT pid, pid_start, state FROM runs WHERE run_id=?", (run_id,)).fetchone()
    finally:
        conn.close()
    if row is None:
        raise UserError(f"no run {run_id} in this repository: `pilothouse live` shows run ids")
    launch = runs.read_spec(layout, run_id)
    local = launch is None or launch.executor == "local"
    if row["state"] == "finished" or (local and not runs.process_matches(row["pid"], row["pid_start"])):
        return False
    # recorded first: a dispatch interrupted before its own handler is in place ends without a
    # verdict that says so, and the supervisor must still stop the task rather than run it again
    conn = store.connect(layout.state_db)
    try:
        with conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (aborted_key(run_id), "1"))
    finally:
        conn.close()
    cancel_run(layout, run_id, grace)
    return True
