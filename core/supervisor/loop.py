"""The supervisor: one per repository, the only writer of job and task state.

It sleeps in `Waker.wait` until something happens (a dispatch exits, a gate or merge finishes,
the operator writes, a worker's log grows), then reconciles: every task is looked at in its
state and moved on if it can be. The reconcile step derives what to do from the store alone,
so a supervisor killed at any point and started again simply carries on: runs still alive are
adopted, verdicts written meanwhile are collected, a gate that was running runs again, a merge
that was recorded as intended is redone (merge_train is idempotent).
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.git.worktrees import GitError
from pilothouse.core.records import state_witness
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog
from pilothouse.core.supervisor import dispatches, flow, health, merging
from pilothouse.core.supervisor import planning as plan
from pilothouse.core.supervisor.dispatches import SupervisorRuns
from pilothouse.core.supervisor.health import SupervisorLease
from pilothouse.core.supervisor.state import StateStore
from pilothouse.core.supervisor.wake import FileWatcher, Waker
from pilothouse.providers.errors import UserError

# passes run back to back while each moves a task (see loop)
MAX_PASSES_IN_A_ROW = 8
FINISHED_JOB_STATES = ("accepted", "shipped", "failed", "cancelled")


def setup_logging(layout: RepoLayout) -> logging.Logger:
    log = logging.getLogger("pilothouse.supervisor")
    if not log.handlers:
        layout.runtime.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(layout.supervisor_log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


class Supervisor(SupervisorLease, SupervisorRuns):
    def __init__(self, layout: RepoLayout, max_workers: int | None = None, *, once: bool = False,
                 integrate_only: bool = False) -> None:
        self.layout = layout
        self.max_workers_override = max_workers
        self.once = once
        self.integrate_only = integrate_only
        self.log = setup_logging(layout)
        state_witness.require_consistent(layout)
        self.conn: sqlite3.Connection = store.connect(layout.state_db)
        _migrate(self.conn)
        self._store_id = health.store_identity(layout)
        self.lost: str | None = None  # why the supervisor stopped on its own (its store went away)
        self.events = EventLog(layout.events)
        self.store = StateStore(layout, self.conn, self.events)
        self.waker = Waker()
        self.children: dict[str, Any] = {}        # run_id -> Popen (our own children, to reap)
        self.adopted: set[str] = set()            # run ids of a previous supervisor's live dispatches
        self.tails: dict[str, runs.RunTail] = {}
        self.inflight: set[tuple[str, ...]] = set()  # gates and merges running in threads
        self.preparing: dict[tuple[str, str], Any] = {}  # tasks whose worktree is being made (their defs)
        self.worktree_lock = threading.Lock()
        self.setup_proven: set[str] = set()  # jobs with a worktree that got through `setup:`
        self.activity_sent: dict[str, tuple[float, str | None]] = {}
        self.usage_sent: dict[str, tuple[float, int]] = {}
        self.stopping = False
        self.starting_again = False  # start_again(): main() execs this process once the loop is left
        self._lock_fh: Any = None
        self._watcher: FileWatcher | None = None
        self._project: Any = None
        self._project_mtime: float | None = None
        self.defs_stepped: dict[str, Any] = {}  # job -> the task definitions its last full pass saw (flow._movable)
        self._passes = 0  # reconcile passes begun (the project settings are looked at once a pass)
        self._project_pass = -1
        self._next_heartbeat = 0.0
        self.good_heads: dict[str, str | None] = {}  # job -> the gated head of its line new checkouts start from
        self._last_error: str | None = None
        self._timer: float | None = None
        self._data_version: int | None = None
        self._locked_since: float | None = None  # when the store's write lock was first found held

    # --- the project ---------------------------------------------------------------------------
    @property
    def project(self) -> Any:
        from pilothouse.core.records.project import load_project

        if self._project is not None and self._project_pass == self._passes:
            return self._project  # looked at once a pass: a pass asked tens of thousands of times in all
        self._project_pass = self._passes
        try:
            mtime = self.layout.project_yaml.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if self._project is None or mtime != self._project_mtime:
            self._project = load_project(self.layout)
            self._project_mtime = mtime
        return self._project

    @property
    def max_workers(self) -> int:
        return int(self.max_workers_override or self.project.max_workers)

    @property
    def default_provider(self) -> tuple[str, str | None] | None:
        # a project driven by a sim scenario runs every role on the sim unless its policy says otherwise
        return ("sim", None) if self.project.sim_scenario else None

    # --- the loop ------------------------------------------------------------------------------
    def run(self, install_signals: bool = True) -> int:
        self.acquire()
        try:
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, self._on_signal)
            self._watcher = FileWatcher(self.waker, self.layout.ai, _logs_root())
            self._watcher.start()
            self.executors.warm(self)  # beside recovery too: joining a cluster takes a second or two
            self.recover()
            self.loop()
        finally:
            if self._watcher is not None:
                self._watcher.stop_event.set()
            self.executors.close()
            self.release()
        if self.lost:
            raise store.StateDamaged(self.lost)
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True
        self.waker.poke()

    def stop(self) -> None:
        """From another thread (tests, the demo): leave the loop soon."""
        self.stopping = True
        self.waker.poke()

    def start_again(self, why: str) -> None:
        """Leave the loop soon, and have `main` start this process again (an exec: the same pid, so
        `supervisor stop` still finds it); the runs go on and the new process adopts them."""
        if not self.starting_again:
            self.log.warning("%s", why)
            self.events.append("supervisor.restarting", data={"pid": os.getpid(), "reason": why})
        self.starting_again = True
        self.stop()

    def loop(self) -> None:
        dirty, again = True, 0
        while not self.stopping and not self.store_lost():
            if self._timer is not None and self._timer <= time.monotonic():
                # due while the loop was busy elsewhere: the wait below would no longer include it
                self._timer = None
                dirty = True
            if dirty:
                moves = self.store.moves
                self._reconcile_once()
                # a pass that moved a task may have made work for the next one (our own writes wake
                # nothing, see _news); bounded, so a record that changes on every pass cannot spin
                again = again + 1 if self.store.moves != moves and again < MAX_PASSES_IN_A_ROW else 0
            if self.once and self.idle():
                return
            self.heartbeat()
            now = time.monotonic()
            timeout = 0.0 if again else max(0.0, min(self._next_heartbeat - now, self._next_flush()))
            if self._timer is not None:
                timeout = max(0.0, min(timeout, self._timer - now))
            due = now + timeout
            exited, items = self.waker.wait(timeout)
            # a timer (a usage window's reset), a signal or a stop(): look at everything then too,
            # even when a worker's log line arrived at the same moment
            dirty = (bool(again) or bool(exited) or not items or time.monotonic() >= due
                     or any(self._news(kind, payload) for kind, payload in items))
            for run_id in exited:
                self.collect(run_id)
            for kind, payload in items:
                if kind == "done":
                    key, on_done, result, error = payload
                    self.inflight.discard(key)
                    if error is not None:
                        self.log.error("%s failed: %r", key, error)
                    on_done(result, error)
                elif kind == "fs" and "logs" in payload:
                    self.read_logs()
                elif kind == "verdict":
                    self.collect_verdict(payload)
            self.flush_activity()

    def _reconcile_once(self) -> None:
        try:
            self.reconcile()
            self._last_error = None
            self._locked_since = None
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                self._reconcile_failed(exc)
                return
            self.lost = health.lock_held_too_long(self, exc)  # the next pass tries again
            if self.lost:
                self.log.error("%s", self.lost)
                self.stopping = True
        except Exception as exc:  # noqa: BLE001 - a supervisor never dies of one bad record
            self._reconcile_failed(exc)

    def _reconcile_failed(self, exc: Exception) -> None:
        self.lost = health.damaged_store(self.layout, exc)
        if self.lost:  # every write would fail the same way: stop and say what to run
            self.log.error("%s", self.lost)
            self.stopping = True
            return
        # e.g. a broken project.yaml or tasks.yaml: say so once and wait for the fix
        message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        if message != self._last_error:
            self.log.exception("cannot proceed: %s", message)
            self.events.append("supervisor.heartbeat", data={"pid": os.getpid(), "error": message})
            self._last_error = message

    def _news(self, kind: str, payload: Any) -> bool:
        """Whether a wake-up item can change what reconcile decides.

        Most writes to state.db and events.jsonl are this supervisor's own, and the watcher reports
        them like anyone else's: reconciling on each would make every event cost a pass over every
        task. Another process's commit (an operator's reply, a `models check`) moves SQLite's
        data_version on our connection; worker logs growing only feed the activity lines."""
        if kind != "fs":
            return True
        if "records" in payload:
            return True
        if "store" in payload:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            changed = version != self._data_version
            self._data_version = version
            return changed
        return False

    def idle(self) -> bool:
        """Nothing running and nothing that could start without the operator (for --once)."""
        if self.live_runs() or self.inflight:
            return False
        if self.integrate_only:
            return True
        for row in self.conn.execute("SELECT * FROM jobs_state"):
            if row["state"] in FINISHED_JOB_STATES or row["state"] == "blocked":
                continue
            if str(row["reason"] or "").startswith(plan.BY_HAND):
                continue  # the operator's `job plan-ready` is the next step
            return False
        return True

    def work(self, key: tuple[str, ...], fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        """Run `fn` in a thread (gates, merges); `on_done(result, exc)` runs back in the loop."""
        if key in self.inflight:
            return
        self.inflight.add(key)

        def target() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as e:  # noqa: BLE001 - reported to the loop, which stops the task
                error = e
            self.waker.post("done", (key, on_done, result, error))

        threading.Thread(target=target, name="-".join(key), daemon=True).start()

    def read_logs(self) -> None:
        dispatches.read_logs(self)

    def wake_at(self, epoch: float) -> None:
        """Reconcile again at `epoch` (e.g. when a usage window may have reset)."""
        delay = max(0.0, epoch - time.time())
        target = time.monotonic() + delay
        if self._timer is None or target < self._timer or self._timer <= time.monotonic():
            self._timer = target

    def _next_flush(self) -> float:
        return dispatches.next_flush(self)

    def flush_activity(self) -> None:
        dispatches.flush(self)

    # --- reconcile -----------------------------------------------------------------------------
    def reconcile(self) -> None:
        from pilothouse.core.records.jobs import list_jobs

        self._passes += 1
        flow.apply_replies(self)
        candidates: list[tuple[str, Any, Any]] = []
        for job in list_jobs(self.layout):
            row = self.store.ensure_job(job.name, job.revision)
            done = job.finished()
            if row["state"] == "created" and done is not None:
                # a fresh clone or a rebuilt state.db: the committed record says how it ended
                self.store.set_job(job.name, "job.adopted", reason=done.says(), state=done.state,
                                   planned_revision=job.revision, event_data={"state": done.state})
                continue
            if row["state"] in FINISHED_JOB_STATES and row["planned_revision"] >= job.revision:
                continue
            try:
                if self.integrate_only:
                    merging.integrate_job(self, job.name)
                    continue
                planned = plan.step(self, job, row)
                candidates += flow.step_job(self, job.name, planned)
            except store.StateDamaged:
                raise  # not this job's: the supervisor stops (see _reconcile_once)
            except (UserError, GitError) as exc:
                # the operator's to fix (a setting, a checkout): a problem of this job, the others go on
                from pilothouse.core.stops.policy import ModelUnfit

                kind = "model_unfit" if isinstance(exc, ModelUnfit) else health.KIND
                health.stalled(self, job.name, str(exc), kind)
                continue
            health.cleared(self, job.name)
        if candidates:
            flow.launch_ready(self, candidates)


def _migrate(conn: sqlite3.Connection) -> None:
    """A state.db made before tasks.counters existed gets the column (it defaults to '{}')."""
    cols = {r["name"] for r in conn.execute("PRAGMA table_info(tasks)")}
    if "counters" not in cols:
        conn.execute("ALTER TABLE tasks ADD COLUMN counters TEXT NOT NULL DEFAULT '{}'")


def _logs_root() -> Path:
    from pilothouse.providers.paths import logs_dir

    return logs_dir()


def run_foreground(layout: RepoLayout, max_workers: int | None = None, *, once: bool = False,
                   integrate_only: bool = False) -> int:
    sup = Supervisor(layout, max_workers, once=once, integrate_only=integrate_only)
    rc = sup.run()
    if sup.starting_again:
        import sys

        # the loop is left and the lock released; what this process joined (a Ray cluster that is
        # no more) goes with the exec, which Ray itself cannot let go of (core/executor/connection.py)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, sys.orig_argv)
    return rc


def main(argv: list[str] | None = None) -> int:
    """`python -m pilothouse.core.supervisor.loop --repo PATH`: how supervisor_ctl starts it detached."""
    import argparse
    import sys

    from pilothouse.core.records.layout import find_repo

    p = argparse.ArgumentParser(prog="pilothouse-supervisor")
    p.add_argument("--repo")
    p.add_argument("--max-workers", type=int)
    p.add_argument("--once", action="store_true")
    args = p.parse_args(argv)
    try:
        return run_foreground(find_repo(args.repo), args.max_workers, once=args.once)
    except UserError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        return health.exit_on_disk_error(exc)


if __name__ == "__main__":
    raise SystemExit(main())
