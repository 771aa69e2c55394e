"""The supervisor's dispatches: which are alive, adopting a predecessor's, collecting verdicts, and
what each is doing now.

A mixin of Supervisor (core/supervisor/loop.py), kept apart because it is the part recovery depends
on: runs still alive after a restart are adopted by pid and start time, verdicts written while
no supervisor watched are collected, and a launch recorded but never spawned is spawned now.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import threading
import time
from functools import cached_property
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.executor.base import Executors
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.supervisor import flow
from pilothouse.core.supervisor.state import BUSY, StateStore
from pilothouse.core.supervisor.wake import Waker


class SupervisorRuns:
    layout: RepoLayout
    conn: sqlite3.Connection
    events: EventLog
    store: StateStore
    waker: Waker
    log: logging.Logger
    children: dict[str, subprocess.Popen[bytes]]
    adopted: set[str]
    tails: dict[str, runs.RunTail]
    activity_sent: dict[str, tuple[float, str | None]]
    usage_sent: dict[str, tuple[float, int]]
    good_heads: dict[str, str | None]
    worktree_lock: threading.Lock
    project: Any  # Supervisor.project: .ai/project.yaml, read again when it changes

    @cached_property
    def executors(self) -> Executors:
        return Executors()

    def live_runs(self) -> set[str]:
        return set(self.children) | self.adopted | self.executors.live()

    def busy_count(self) -> int:
        marks = ",".join("?" * len(BUSY))
        row = self.conn.execute(f"SELECT count(*) FROM tasks WHERE state IN ({marks})", BUSY).fetchone()
        planning = self.conn.execute("SELECT count(*) FROM runs WHERE role='assigner' AND state='running'").fetchone()
        return int(row[0]) + int(planning[0])

    def recover(self) -> None:
        """Adopt dispatches a previous supervisor left running; collect those that finished."""
        for row in list(self.conn.execute("SELECT * FROM runs WHERE state='running'")):
            run_id = row["run_id"]
            launch = runs.read_spec(self.layout, run_id)
            executor = self.executors.of(launch, self.layout)
            if executor.adopt(self, row, launch):
                continue
            verdict = executor.collect(self, run_id, row["provider"])
            if verdict is None and row["pid"] is None and launch is not None and launch.executor == "local":
                # recorded but never spawned: spawning it now is its first and only start (a cluster
                # run's executor knows that itself: its adopt started it)
                from pilothouse.core.supervisor.launch import spawn

                spawn(self, launch)
                continue
            self.finish(row, verdict or self._lost(row, "the dispatch ended without a verdict"))
        self.good_heads = {}  # each job's, read again when its next checkout is made

    def collect(self, run_id: str) -> None:
        executor = self.executors.of(runs.read_spec(self.layout, run_id), self.layout)
        executor.forget(self, run_id)
        row = self.store.run(run_id)
        if row is None or row["state"] == "finished":
            return
        verdict = executor.collect(self, run_id, row["provider"])
        self.finish(row, verdict or self._lost(row, "the dispatch exited without a verdict"))

    def _lost(self, row: sqlite3.Row, why: str) -> dict[str, Any]:
        """The verdict of a dispatch that died without one. It never scrubbed its run folder either
        (providers/scrub.py), so that is done here, before anyone reads the folder."""
        from pilothouse.providers.redact import configured_redactor
        from pilothouse.providers.scrub import scrub_run

        try:
            held = scrub_run(row["provider"], row["run_id"], configured_redactor())
        except OSError as exc:
            self.log.warning("run %s: cannot scrub its run folder: %s", row["run_id"], exc)
        else:
            if held:
                self.log.info("run %s: redacted a key in %d file(s) of its run folder", row["run_id"], len(held))
        return runs.synth_verdict(self.layout, row, why)

    def collect_verdict(self, run_id: str) -> None:
        """A dispatch wrote its verdict.json: take it now rather than when the process has wound down
        (its exit is still watched, to reap it)."""
        if run_id not in self.live_runs():
            return
        row = self.store.run(run_id)
        if row is None or row["state"] == "finished":
            return
        verdict = runs.read_verdict(self.layout, run_id, row["provider"])
        if verdict is not None:
            self.finish(row, verdict)

    def finish(self, row: sqlite3.Row, verdict: dict[str, Any]) -> None:
        tail = self.tails.pop(row["run_id"], None)
        if tail is not None:
            tail.read()
        runs.finish_run(self.conn, self.events, row, verdict)
        if verdict.get("tokens") or verdict.get("usage") == "unknown":
            from pilothouse.providers.usage import label_of

            self.events.append("run.usage", job=row["job"], task=row["task"], run=row["run_id"],
                               data={"tokens": verdict.get("tokens"), "cost_usd": verdict.get("cost_usd"),
                                     "usage": label_of(verdict), "final": True})
        flow.note_quota(self, row, verdict)
        cap = self.project.budgets.job_tokens
        if cap is not None and row["job"]:
            from pilothouse.core.stops import budgets

            # the run that took the job past its budget says so as it ends, not on whichever later pass
            # next looks before a launch (there may be none: its job may have nothing left to launch)
            budgets.enforce(self.layout, row["job"], cap, conn=self.conn, log=self.events)
        self.activity_sent.pop(row["run_id"], None)
        self.usage_sent.pop(row["run_id"], None)


# --- what a worker is doing now ---------------------------------------------------------------
# From its run's normalised event log (logs/<provider>/<run_id>.jsonl): the supervisor tails each
# live run's log when watchfiles reports it grew, and emits coalesced events for the cockpit:
# `run.activity` (the current tool, at most once a second per run) and `run.usage` (tokens so far,
# at most every five seconds per run; the final figure comes with run.finished).

HEARTBEAT_S = 30.0
ACTIVITY_MIN_S = 1.0
USAGE_MIN_S = 5.0


def read_logs(sup: Any) -> None:
    for run_id, tail in list(sup.tails.items()):
        if tail.read():
            sup.activity_sent.setdefault(run_id, (0.0, None))


def next_flush(sup: Any) -> float:
    """Seconds until a coalesced activity event is due (HEARTBEAT_S when none is)."""
    pending = [sent for rid, (sent, tool) in sup.activity_sent.items()
               if rid in sup.tails and sup.tails[rid].tool != tool]
    if not pending:
        return HEARTBEAT_S
    return max(0.0, min(pending) + ACTIVITY_MIN_S - time.monotonic())


def flush(sup: Any) -> None:
    now = time.monotonic()
    for run_id, tail in list(sup.tails.items()):
        sent, tool = sup.activity_sent.get(run_id, (0.0, None))
        row = None
        if tail.tool and tail.tool != tool and now - sent >= ACTIVITY_MIN_S:
            row = sup.store.run(run_id)
            if row is None:
                continue
            if row["task"]:
                sup.store.update_task(row["job"], row["task"], activity=tail.tool)
            sup.events.append("run.activity", job=row["job"], task=row["task"], run=run_id,
                              data={"tool": tail.tool, "role": row["role"]})
            sup.activity_sent[run_id] = (now, tail.tool)
        total = sum(tail.usage.values())
        usent, utotal = sup.usage_sent.get(run_id, (0.0, 0))
        if total != utotal and now - usent >= USAGE_MIN_S:
            row = row or sup.store.run(run_id)
            if row is not None:
                sup.events.append("run.usage", job=row["job"], task=row["task"], run=run_id,
                                  data={"tokens": dict(tail.usage), "usage": tail.label, "final": False})
            sup.usage_sent[run_id] = (now, total)
