"""A task's attempts and elapsed time: the one place they are worked out, for every view of a job.

`pilothouse job status`, `pilothouse replay` and `pilothouse report` all take them from `figures()`
over the job's event log folded (core/queries/timeline.py), so the three say the same of the same
log; the cockpit's panels count the same way from the store's columns, through `worked_seconds`.

- **attempts**: the attempt a task is on, as the supervisor counts them (`tasks.attempt`): a fresh
  builder run starts the next one, a resumed session goes on with the same one, and a usage-limit
  wait gives its attempt back (no attempt used). The log says it on each builder's `run.started`
  (`data.attempt`) and on the `task.state` that gives one back; a log written before that said
  it is read the way the supervisor counted (a running task that goes waiting gave its attempt back).
- **elapsed**: from the start of the task's current attempt (its fresh builder run: the store's
  `started_at`) to its last state change (while it is active: to the moment the view is of), less
  the time it waited for the operator (a problem of the task open), as the cockpit has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.core.queries.timeline import TimelineFold

# task states in which the work moves on its own: the elapsed time goes on counting in them
ACTIVE = frozenset({"running", "gating", "reviewing", "merging"})

Spans = Iterable[tuple[float, float | None]]


def attempt_after_run(attempts: int, data: dict[str, Any]) -> int:
    """The task's attempt once a builder run of it started (`data`: its run.started's)."""
    said = data.get("attempt")
    if isinstance(said, int) and not isinstance(said, bool) and said >= 0:
        return said
    return attempts if data.get("mode") == "resume" else attempts + 1


def attempt_after_state(attempts: int, data: dict[str, Any]) -> int:
    """The task's attempt once its state changed (`data`: the task.state's)."""
    said = data.get("attempt")
    if isinstance(said, int) and not isinstance(said, bool) and said >= 0:
        return said
    if data.get("from") == "running" and data.get("to") == "waiting":
        return max(0, attempts - 1)  # a builder at a usage limit: the supervisor gave the attempt back
    return attempts


def _merged(spans: Spans, lo: float, hi: float) -> list[tuple[float, float]]:
    """The spans (end None: still going) clipped to [lo, hi], sorted, overlaps joined."""
    out: list[tuple[float, float]] = []
    for a, b in sorted((a, hi if b is None else b) for a, b in spans):
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def worked_seconds(start: float, end: float, pauses: Spans = (), busy: Spans = ()) -> float:
    """Seconds from `start` to `end` less the time spent waiting for the operator: `pauses` (a
    problem's opened and closed times) except where `busy` (a worker of the job ran meanwhile)."""
    total = end - start
    working = _merged(busy, start, end)
    for a, b in _merged(pauses, start, end):
        total -= b - a
        for c, d in working:  # the part of the wait a worker of the job was running
            total += max(0.0, min(b, d) - max(a, c))
    return total


def elapsed_s(started: float | None, changed: float | None, state: str, until: float,
              pauses: Spans = ()) -> float | None:
    """A task's elapsed seconds at `until` (None: no attempt started yet)."""
    if started is None:
        return None
    end = until if state in ACTIVE or changed is None else changed
    return round(worked_seconds(started, max(started, end), pauses), 3)


def figures(fold: TimelineFold, until: float | None = None) -> dict[str, tuple[int, float | None]]:
    """Each task's (attempts, elapsed seconds) in the folded log at `until` (default: its last moment)."""
    at = until if until is not None else (fold.last or 0.0)
    pauses: dict[str, list[tuple[float, float | None]]] = {}
    for p in fold.problems.values():
        if isinstance(p.get("task"), str):
            pauses.setdefault(p["task"], []).append((p["opened"], p.get("closed")))
    return {name: (info["attempts"], elapsed_s(info.get("started"), info.get("changed"), info["state"], at,
                                                pauses.get(name, ())))
            for name, info in fold.tasks.items()}


def duration_text(seconds: float | None) -> str:
    """`4.2s`, `3m07s`, `2h05m`; `—` for none."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"
