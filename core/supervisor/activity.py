"""What a worker is doing now, from its run's normalised event log (logs/<provider>/<run_id>.jsonl).

The supervisor tails each live run's log when watchfiles reports it grew, and emits coalesced
events for the cockpit: `run.activity` (the current tool, at most once a second per run) and
`run.usage` (tokens so far, at most every five seconds per run; the final figure comes with
run.finished).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor

HEARTBEAT_S = 30.0
ACTIVITY_MIN_S = 1.0
USAGE_MIN_S = 5.0


def read_logs(sup: Supervisor) -> None:
    for run_id, tail in list(sup.tails.items()):
        if tail.read():
            sup.activity_sent.setdefault(run_id, (0.0, None))


def next_flush(sup: Supervisor) -> float:
    """Seconds until a coalesced activity event is due (HEARTBEAT_S when none is)."""
    pending = [sent for rid, (sent, tool) in sup.activity_sent.items()
               if rid in sup.tails and sup.tails[rid].tool != tool]
    if not pending:
        return HEARTBEAT_S
    return max(0.0, min(pending) + ACTIVITY_MIN_S - time.monotonic())


def flush(sup: Supervisor) -> None:
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
