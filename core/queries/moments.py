"""When each of a job's events happened, as every view of the job reads it (the report, replay, the
cockpit's timeline): the moment of a line of the log, and the job's span, from the stamps its lines carry.

A stamp is what the writing machine's clock said, and a log copied from elsewhere, damaged, or
written by a hostile worker can say anything (year 9999, year 1). Two rules keep such a stamp from
becoming the job's start or end:

- **No moment past tomorrow.** A stamp more than `MAX_AHEAD_S` (a day) after the reading machine's
  clock is no moment at all: no log can hold what has not happened yet. A day is wider than any skew
  between two machines' clocks and any zone slip (UTC-12 to UTC+14), so a genuine log read on another
  machine is never cut; the event still counts, at the moment of the line before it.
- **The log's order is the truth.** Each line is stamped under the log's lock, in the order it is
  written, so genuine stamps never go back. When some do, the stamps that agree with most of the
  others are right: the longest run of lines whose stamps keep the log's order (not necessarily
  adjacent) is the job's clock, and a line stamped out of that order (a stray clock, a damaged or
  forged line) is moved to where its neighbours put it. So one line stamped an hour ahead of the
  lines after it does not end the job an hour late, and one stamped in 2001 amid lines of 2026 does
  not start it in 2001. A clock that was set back for good keeps the longer part of the job.

`moments()` applies both to a whole list of stamps (a report, a replay: the whole log is there);
`next_moment()` is the first rule and the "never back" half of the second, for a live view that
folds lines as they come and cannot look ahead (it is corrected the next time the log is read whole).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Sequence

MAX_AHEAD_S = 86_400.0  # a day: see the module's docstring


def limit(now: float | None = None) -> float:
    """The latest stamp that can be a moment when read at `now` (default: this machine's clock)."""
    return (time.time() if now is None else now) + MAX_AHEAD_S


def _chain_lengths(values: Sequence[float]) -> list[int]:
    """For each value, the length of the longest non-decreasing run of values ending at it."""
    tails: list[float] = []
    out = []
    for v in values:
        k = bisect_right(tails, v)
        if k == len(tails):
            tails.append(v)
        else:
            tails[k] = v
        out.append(k + 1)
    return out


def moments(stamps: Sequence[float | None], now: float | None = None) -> list[float | None]:
    """Each line's moment, in log order (never less than the one before): its stamp, unless the
    stamp is unreadable (None: the line has no moment and the views pass over it, as before), past
    tomorrow, or out of the log's order (both: the moment of the line before; the first line's, the
    job's start)."""
    latest = limit(now)
    sane = [s for s in stamps if s is not None and s <= latest]
    if not sane:
        return [None] * len(stamps)
    if all(a <= b for a, b in zip(sane, sane[1:], strict=False)):
        in_order = [True] * len(sane)  # every stamp is its own moment (nearly every log)
        start, end = sane[0], sane[-1]
    else:
        ends = _chain_lengths(sane)
        starts = _chain_lengths([-v for v in reversed(sane)])[::-1]
        longest = max(ends)
        # a line is in order when some longest run in order goes through it; of those runs, the
        # latest start and the earliest end bound the job (a stray line at either end is outside)
        in_order = [a + b - 1 == longest for a, b in zip(ends, starts, strict=True)]
        start = max(v for v, n in zip(sane, starts, strict=True) if n == longest)
        end = min(v for v, n in zip(sane, ends, strict=True) if n == longest)
    out: list[float | None] = []
    cur: float | None = None
    k = 0  # where the next sane stamp is in `sane`
    for s in stamps:
        if s is None:
            out.append(None)
            continue
        ok = s <= latest and in_order[k] and start <= s <= end and (cur is None or s >= cur)
        k += s <= latest
        cur = s if ok else (start if cur is None else cur)
        out.append(cur)
    return out


def next_moment(before: float | None, stamp: float | None, now: float | None = None) -> float | None:
    """A line's moment when the lines after it are not known yet (a live view): its stamp, but never
    before the line before it, and never one past tomorrow (then the line before's; None for none)."""
    if stamp is None:
        return None
    if stamp > limit(now):
        return before
    return stamp if before is None else max(stamp, before)


def span(first: float | None, last: float | None, tail: float | None,
         now: float | None = None) -> tuple[float | None, float | None]:
    """The job's span: from the first moment the fold read to the last, or to `tail` (the stamp of the
    job's last line of any type, e.g. a run's usage after the last event the fold reads) when that is a
    moment (not past tomorrow) and not before the last one. Report and replay both take it from here."""
    sane = tail is not None and tail <= limit(now)
    if first is None or last is None:  # the fold read no moment: the last line is the job, if it is one
        return (tail, tail) if sane else (None, None)
    return first, (tail if sane and tail is not None and last <= tail else last)
