"""Dispatches on this machine: a process in its own session, watched by its pidfd and its verdict
pipe, adopted after a restart by pid and start time (core/dispatch/runs.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.dispatch.runs import Launch

if TYPE_CHECKING:
    from pilothouse.core.executor.host import Host
    from pilothouse.core.records.layout import RepoLayout


class LocalExecutor:
    name = "local"

    def launch(self, sup: Host, launch: Launch, event_extra: dict[str, Any] | None = None) -> None:
        notify_r, notify_w = os.pipe()
        try:
            proc = runs.spawn(sup.layout, launch, nice=worker_nice(sup), notify_fd=notify_w)
        except BaseException:
            os.close(notify_r)
            raise
        finally:
            os.close(notify_w)  # the dispatch holds the only write end: EOF once it is gone
        start = runs.record_pid(sup.conn, launch.run_id, proc.pid)
        sup.children[launch.run_id] = proc
        sup.waker.watch_pid(launch.run_id, proc.pid)
        sup.waker.watch_verdict(launch.run_id, notify_r)
        started(sup, launch, {"pid": proc.pid, "pid_start": start, **(event_extra or {})})
        sup.log.info("launched %s %s run %s (pid %s)", launch.role, launch.task or launch.job, launch.run_id,
                     proc.pid)

    def adopt(self, sup: Host, row: sqlite3.Row, launch: Launch | None) -> bool:
        run_id = row["run_id"]
        pid, start = row["pid"], row["pid_start"]
        if not runs.process_matches(pid, start):
            pid = runs.find_dispatch_pid(run_id)
            if pid:
                start = runs.record_pid(sup.conn, run_id, pid)
        if pid and runs.process_matches(pid, start) and sup.waker.watch_pid(run_id, pid):
            sup.adopted.add(run_id)
            sup.tails[run_id] = runs.RunTail(runs.provider_logs(row["provider"], run_id)["jsonl"])
            sup.log.info("adopted run %s (pid %s)", run_id, pid)
            return True
        return False

    def collect(self, sup: Host, run_id: str, provider: str) -> dict[str, Any] | None:
        return runs.read_verdict(sup.layout, run_id, provider)

    def forget(self, sup: Host, run_id: str) -> None:
        sup.waker.unwatch_pid(run_id)
        proc = sup.children.pop(run_id, None)
        if proc is not None:
            proc.wait()
        sup.adopted.discard(run_id)

    def live(self) -> set[str]:
        return set()  # the supervisor's children and adopted pids

    def cancel(self, layout: RepoLayout, run_id: str, grace: float) -> bool:
        from pilothouse.core.state import store

        conn = store.connect(layout.state_db, readonly=True)
        try:
            row = conn.execute("SELECT pid, pid_start, state FROM runs WHERE run_id=?", (run_id,)).fetchone()
        finally:
            conn.close()
        if row is None or row["state"] == "finished" or not runs.process_matches(row["pid"], row["pid_start"]):
            return False
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(row["pid"], sig)  # dispatch runs in its own session: its pgid is its pid
            except ProcessLookupError:
                return True
            if runs.wait_gone(row["pid"], row["pid_start"], wait):
                return True
        return True


def started(sup: Host, launch: Launch, data: dict[str, Any]) -> None:
    """Tail the run's log and say it started (every executor's run.started looks alike)."""
    log = runs.provider_logs(launch.provider, launch.run_id)["jsonl"]
    sup.tails[launch.run_id] = runs.RunTail(log)
    sup.events.append("run.started", job=launch.job, task=launch.task, run=launch.run_id,
                      data={"role": launch.role, "mode": launch.mode, "provider": launch.provider,
                            "model": launch.model, "attempt": launch.attempt, "resume_of": launch.resume_of,
                            "log": str(log), "executor": launch.executor, **data})


def worker_nice(sup: Host) -> int:
    from pilothouse.core.executor.host import settings

    return int(getattr(settings(sup), "worker_nice", 0) or 0)
