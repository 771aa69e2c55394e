"""A job played back from its event log: the state at any moment, jumps to the next problem or
failure or merge, and the events just before a moment.

The state at t is the timeline fold (core/queries/timeline.py) of the job's events up to t. A seek
bisects over the events' times, copies the nearest fold kept at or before that point (one every
`EVERY` events) and folds at most `EVERY` events on from it: a seek costs the same in a log of a
thousand events as in one of a million, besides the snapshot of what it found. Only the events the
fold reads are held (the index skips the activity and usage lines, nearly all of a big log);
`events_until` reads the lines around a moment through the event index, by offset.

Never state.db: a `.ai/` copied from another machine replays the same. The log is written in time
order (each line is stamped under the log's lock), so "the events up to t" is a prefix of the
log. Each event is at its moment as core/queries/moments.py reads the whole log (the report reads
it the same way): a stamp past tomorrow or out of the log's order never starts or ends the job, and
moments never go back. The job's span is `moments.span`, the report's too.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pilothouse.core.queries.moments import limit, moments, span
from pilothouse.core.queries.timeline import TYPES, Mark, Timeline, TimelineFold
from pilothouse.core.queries.timeline_model import _dt, _text, _ts
from pilothouse.core.state.event_index import EventLookup

DEFAULT_JUMPS: frozenset[str] = frozenset({"problem_opened", "gate_failed", "merge"})
EVERY = 256  # events between two kept folds: a seek folds at most this many


class Replay:
    """One job's log, ready to be looked at any moment; `refresh()` follows a job still running."""

    def __init__(self, events_path: Path, job: str) -> None:
        self.events_path = Path(events_path)
        self.job = job
        self.start: datetime | None = None
        self.end: datetime | None = None
        self._reset()
        self.refresh()

    def _reset(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._stamps: list[float] = []       # each event's stamp, as the log has it
        self._ordered = True                 # every stamp so far is its own moment
        self._times: list[float] = []        # each event's moment (moments.py), never less than the one before
        self._seqs: list[int] = []           # each event's seq, never less than the one before
        self._folds = [TimelineFold(self.job)]  # _folds[i]: the fold of the first i * EVERY events
        self._live = TimelineFold(self.job)  # the fold of every event read
        self._after = -1                     # the offset of the last line read
        self._file: tuple[int, int] | None = None  # (inode, size) the log had then
        self._indexed: bool | None = None

    def refresh(self) -> bool:
        """Fold the events appended since the last look (a job still running); True if there were any."""
        try:
            st = os.stat(self.events_path)
            file: tuple[int, int] | None = (st.st_ino, st.st_size)
        except FileNotFoundError:
            file = None
        if self._file is not None and (file is None or file[0] != self._file[0] or file[1] < self._file[1]):
            self._reset()  # replaced or cut short: what was read is no longer this log's story
        old_end = self.end
        with EventLookup(self.events_path) as lookup:
            if self._indexed is not None and lookup.indexed != self._indexed:
                self._reset()  # offsets of another kind (bytes, or places in one reading)
            self._indexed = lookup.indexed
            new = lookup.select_after(self.job, self._after, TYPES)
            _, last = lookup.bounds(self.job)
        self._file = file
        if new:
            self._after = new[-1][0]
            self._add([ev for _, ev in new])
        self._live.tail = _ts(last.get("ts")) if last else None
        first, end = span(self._live.first, self._live.last, self._live.tail)
        self.start, self.end = _dt(first), _dt(end)
        return bool(new) or self.end != old_end

    def _add(self, events: list[dict[str, Any]]) -> None:
        """Fold the events read, each at its moment read with every event before it (moments.py).
        Stamps that keep the log's order are their own moments and fold on from where the fold was;
        when new ones move an earlier moment (a log stamped out of order), the folds are made again."""
        kept = [(ev, s) for ev, s in ((ev, _ts(ev.get("ts"))) for ev in events) if s is not None]
        if not kept:
            return  # the fold passes over a line with no readable stamp too
        old = len(self._events)
        self._events += [ev for ev, _ in kept]
        self._stamps += [s for _, s in kept]
        new = [s for _, s in kept]
        if self._ordered and new[-1] <= limit() and all(
                a <= b for a, b in zip([self._stamps[old - 1] if old else new[0], *new], new, strict=False)):
            times: list[float | None] = [*self._times, *new]
        else:
            times = moments(self._stamps)
            self._ordered = times == self._stamps
            if times[:old] != self._times:  # an earlier moment moved: fold everything again
                self._folds, self._live, old = [TimelineFold(self.job)], TimelineFold(self.job), 0
                self._times, self._seqs = [], []
        if any(t is None for t in times[old:]):
            return  # no stamp of the job is a moment (every one past tomorrow): nothing to place
        for n in range(old, len(self._events)):
            ev, t = self._events[n], times[n]
            assert t is not None
            self._times.append(t)
            seq = int(ev.get("seq") or 0)
            self._seqs.append(max(seq, self._seqs[-1]) if self._seqs else seq)
            self._live.apply(ev, t)
            if (n + 1) % EVERY == 0:
                self._folds.append(self._live.copy())

    # ------------------------------------------------------------ the state at a moment

    def fold_at(self, t: datetime) -> TimelineFold:
        """The fold of the events up to t (a fold of its own: the caller may go on folding)."""
        return self._fold_of_first(bisect_right(self._times, t.timestamp()))

    def fold_at_seq(self, seq: int) -> TimelineFold:
        """The fold of the events up to the log's line `seq`, that one included."""
        fold = self._fold_of_first(bisect_right(self._seqs, seq))
        fold.tail = None  # the job's last line of any type (a run's last usage) may come after `seq`
        return fold

    def _fold_of_first(self, n: int) -> TimelineFold:
        if n == len(self._events):
            return self._live.copy()
        k = n // EVERY
        fold = self._folds[k].copy()
        return fold.extend(self._events[k * EVERY:n])

    def at(self, t: datetime, by: str = "slot") -> Timeline:
        """The job as it stood at t, from its events alone; the Timeline's `end` is t."""
        shape: Literal["slot", "task"] = "task" if by == "task" else "slot"
        return self.fold_at(t).snapshot(shape, until=t.timestamp()).model_copy(update={"end": t})

    def at_seq(self, seq: int, by: str = "slot") -> Timeline:
        """The job as it stood just after the log's line `seq` was written (a moment finer than a
        stamp: two lines stamped in the same millisecond are two moments here); the Timeline's `end`
        is the last of its events folded, as `read` has it."""
        shape: Literal["slot", "task"] = "task" if by == "task" else "slot"
        return self.fold_at_seq(seq).snapshot(shape)

    # ------------------------------------------------------------ jumps

    def _marks(self, kinds: Collection[str]) -> list[dict[str, Any]]:
        return [m for m in self._live.marks if m["kind"] in kinds]

    def next_mark(self, t: datetime, kinds: Collection[str] = DEFAULT_JUMPS) -> Mark | None:
        """The first mark of `kinds` strictly after t (its `lane` is not set: `at(mark.at, by)` has it)."""
        key = t.timestamp()
        return next((_mark(m) for m in self._marks(kinds) if m["at"] > key), None)

    def prev_mark(self, t: datetime, kinds: Collection[str] = DEFAULT_JUMPS) -> Mark | None:
        """The last mark of `kinds` strictly before t."""
        key = t.timestamp()
        return next((_mark(m) for m in reversed(self._marks(kinds)) if m["at"] < key), None)

    # ------------------------------------------------------------ the log around a moment

    def events_until(self, t: datetime, last: int = 50) -> list[dict[str, Any]]:
        """The job's last `last` events of every type at or before t, in log order, as the log has them
        (worker text included: show them through `inert()`)."""
        with EventLookup(self.events_path) as lookup:
            return lookup.until(self.job, t.timestamp(), last)


def _mark(m: dict[str, Any]) -> Mark:
    return Mark(kind=m["kind"], at=_dt(m["at"]), task=m["task"], text=_text(m["text"]) or "", seq=m["seq"])
