"""A job's timeline, from its events alone: lanes of bars (who held which task in which state, when),
marks (problems opened and answered, gate failures, merges, quota waits), and per run its tokens and
cost with their label (measured, estimated, unknown; providers/usage.py).

Never state.db: the event log carries the whole story, so a `.ai/` copied from another machine
shows the same picture. The model is a fold (`TimelineFold.apply`, one event at a time, in log
order) and `snapshot(at)` turns what was folded into pydantic values. The state at a moment t is
the fold of the events up to t: a replay seeks through the event index to the last line at or
before t and folds up to it (or folds further from a kept fold), nothing else is needed.

An event's moment is its stamp as core/queries/moments.py reads it: a stamp past tomorrow or out of
the log's order (a damaged or hostile log) never starts or ends the job. `extend` reads a batch of
lines whole; `apply` alone, a line at a time (a live view), can only keep moments from going back.

Everything a worker could have written (problem summaries, review findings, reasons, an operator's
words quoted back) is shown through `inert()` after the configured redaction: a log from elsewhere
was redacted with that machine's keys, not this one's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pilothouse.core.queries.timeline_model import (  # noqa: F401 - the model's names are the timeline's
    _BAR_OF,
    _JOB_STATE,
    JOB_LANE,
    STATE_WORDS,
    STATES,
    TYPES,
    Bar,
    BarState,
    GateRun,
    Lane,
    Mark,
    MarkKind,
    Problem,
    Review,
    Run,
    TaskOutcome,
    Timeline,
    _dt,
    _text,
    _ts,
    role_of,
)


class TimelineFold:
    """The job's story so far, folded from its events one at a time (cheap enough for a live tail)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.state = "created"
        self.seq = 0
        self.first: float | None = None
        self.last: float | None = None
        self.tail: float | None = None   # the stamp of the job's last line of any type (fold_of sets it)
        self.runs: dict[str, dict[str, Any]] = {}
        self.bars: list[dict[str, Any]] = []          # closed and open, in start order
        self.open: dict[str, dict[str, Any]] = {}     # occupant (task, or JOB_LANE) -> its open bar
        self.open_at: dict[str, int] = {}             # occupant -> where its open bar is in `bars`
        self.slot_of: dict[str, int] = {}             # occupant -> slot while it holds one
        self.free: list[int] = []
        self.slots = 0
        self.marks: list[dict[str, Any]] = []
        self.tasks: dict[str, dict[str, Any]] = {}
        self.gates: list[dict[str, Any]] = []
        self.open_gate: dict[str | None, dict[str, Any]] = {}
        self.open_gate_at: dict[str | None, int] = {}  # task -> where its open gate is in `gates`
        self.reviews: list[dict[str, Any]] = []
        self.problems: dict[str, dict[str, Any]] = {}
        self.head: str | None = None
        self.shipped: str | None = None

    def copy(self) -> TimelineFold:
        """A fold that goes on from here on its own (a replay keeps one every few hundred events).

        Cheap: what the fold never changes again is shared, not copied. A closed bar or gate, a
        mark, a review is final; a run is replaced, never changed, when it finishes. Only the open
        bars and gates, the tasks and the problems (changed in place) are copied."""
        new = TimelineFold.__new__(TimelineFold)
        new.__dict__.update(self.__dict__)
        new.bars, new.gates = list(self.bars), list(self.gates)
        new.open, new.open_gate = {}, {}
        for occupant, bar in self.open.items():
            new.open[occupant] = new.bars[self.open_at[occupant]] = dict(bar)
        for task, gate in self.open_gate.items():
            new.open_gate[task] = new.gates[self.open_gate_at[task]] = dict(gate)
        new.open_at, new.open_gate_at = dict(self.open_at), dict(self.open_gate_at)
        new.runs, new.slot_of, new.free = dict(self.runs), dict(self.slot_of), list(self.free)
        new.marks, new.reviews = list(self.marks), list(self.reviews)
        new.tasks = {k: dict(v) for k, v in self.tasks.items()}
        new.problems = {k: dict(v) for k, v in self.problems.items()}
        return new

    def extend(self, events: Iterable[dict[str, Any]]) -> TimelineFold:
        """Fold a batch of lines, each at its moment read with the whole batch (core/queries/moments.py)."""
        from pilothouse.core.queries.moments import moments

        mine = [ev for ev in events if ev.get("job") == self.job and ev.get("type") in TYPES]
        for ev, t in zip(mine, moments([_ts(ev.get("ts")) for ev in mine]), strict=True):
            if t is not None:
                self.apply(ev, t if self.last is None else max(t, self.last))
        return self

    def apply(self, ev: dict[str, Any], t: float | None = None) -> None:
        """Fold one line, at moment `t` (given by a reader that saw the lines around it), or else at
        its stamp as a live view can read it: never before the line before, never past tomorrow."""
        if ev.get("job") != self.job or ev.get("type") not in TYPES:
            return
        if t is None:
            from pilothouse.core.queries.moments import next_moment

            t = next_moment(self.last, _ts(ev.get("ts")))
        if t is None:
            return
        self.seq = max(self.seq, int(ev.get("seq") or 0))
        self.first = t if self.first is None else min(self.first, t)
        self.last = t if self.last is None else max(self.last, t)
        kind: str = ev["type"]
        data = ev.get("data") or {}
        task, run = ev.get("task"), ev.get("run")
        if kind in _JOB_STATE:
            # the state the writer put in the event is the state state.db got (a `job.waiting` of a
            # planner's usage limit is "planning" there, as `job status` shows it)
            said = data.get("state")
            self.state = said if isinstance(said, str) and said else (_JOB_STATE[kind] or self.state)
            if kind == "job.accepted":
                self.head = data.get("head") if isinstance(data.get("head"), str) else self.head
            elif kind == "job.shipped":
                new = data.get("new")
                self.shipped = new if isinstance(new, str) else self.head
        elif kind == "task.state" and isinstance(task, str):
            self._task_state(t, task, run, data)
        elif kind == "run.started" and isinstance(run, str):
            self._run_started(t, task, run, data)
        elif kind == "run.finished" and isinstance(run, str):
            self._run_finished(t, run, data)
        elif kind == "gate.started":
            gate = {"task": task, "level": data.get("level"), "where": data.get("where"), "passed": None,
                    "start": t, "end": None, "duration_s": None, "counts": None, "reason": None}
            self.open_gate[task], self.open_gate_at[task] = gate, len(self.gates)
            self.gates.append(gate)
            if task is None:  # the job's full gate on its line holds the job's own lane
                self._enter(t, JOB_LANE, None, "gating", None, None)
        elif kind == "gate.finished":
            self._gate_finished(t, ev, task, data)
        elif kind in ("merge.finished", "merge.rolled_back"):
            if kind == "merge.rolled_back" or data.get("ok"):
                sha = data.get("merged_sha")
                if task in self.tasks and isinstance(sha, str) and kind == "merge.finished":
                    self.tasks[task]["merged_sha"] = sha
                self._mark("merge" if kind == "merge.finished" else "merge_rolled_back", t, ev,
                           (sha or "")[:10] if isinstance(sha, str) else data.get("reason"))
        elif kind == "review.finished":
            self.reviews.append({"task": task, "round": data.get("round"), "overall": data.get("overall"),
                                 "findings": data.get("findings") if isinstance(data.get("findings"), int) else 0,
                                 "summaries": [s for s in (_text(x) for x in data.get("summaries") or []) if s],
                                 "at": t})
            if task in self.tasks and isinstance(data.get("round"), int):
                self.tasks[task]["review_round"] = data["round"]
        elif kind.startswith("problem."):
            self._problem(t, ev, kind, task, data)
        elif kind == "budget.exceeded":
            self._mark("quota_wait", t, ev, data.get("reason") or "token budget reached")

    # -- the parts of apply -------------------------------------------------------------------------

    def _task_state(self, t: float, task: str, run: str | None, data: dict[str, Any]) -> None:
        from pilothouse.core.queries.task_figures import attempt_after_state

        info = self.tasks.setdefault(task, {"state": "planned", "reason": None, "attempts": 0, "review_round": 0,
                                            "merged_sha": None, "started": None, "changed": None})
        to = data.get("to")
        info["state"] = to if isinstance(to, str) else info["state"]
        info["reason"] = data.get("reason")
        info["attempts"] = attempt_after_state(info["attempts"], data)
        info["changed"] = t
        bar = _BAR_OF.get(str(to))
        if bar is None:
            self._leave(t, task)
            return
        if bar == "waiting_quota" and "usage limit" in str(data.get("reason") or ""):
            self._mark("quota_wait", t, {"task": task, "seq": self.seq}, data.get("reason"))
        self._enter(t, task, task, bar, run, data.get("reason"))

    def _enter(self, t: float, occupant: str, task: str | None, state: str, run: str | None,
               reason: object) -> None:
        cur = self.open.get(occupant)
        if cur is not None:
            if cur["state"] == state and cur["run"] == run:
                return
            cur["end"] = t
        if occupant not in self.slot_of:
            if self.free:
                self.free.sort()
                self.slot_of[occupant] = self.free.pop(0)
            else:
                self.slot_of[occupant] = self.slots
                self.slots += 1
        bar = {"slot": self.slot_of[occupant], "task": task, "state": state, "start": t, "end": None,
               "run": run, "reason": reason}
        self.open[occupant], self.open_at[occupant] = bar, len(self.bars)
        self.bars.append(bar)

    def _leave(self, t: float, occupant: str) -> None:
        cur = self.open.pop(occupant, None)
        self.open_at.pop(occupant, None)
        if cur is not None:
            cur["end"] = t
        slot = self.slot_of.pop(occupant, None)
        if slot is not None:
            self.free.append(slot)

    def _run_started(self, t: float, task: str | None, run: str, data: dict[str, Any]) -> None:
        attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else 1
        role = data.get("role") if isinstance(data.get("role"), str) else None
        self.runs[run] = {"run": run, "task": task, "role": role_of(role, data.get("mode"), attempt),
                          "mode": data.get("mode"), "provider": data.get("provider"), "model": data.get("model"),
                          "attempt": attempt, "start": t, "end": None, "verdict": None, "reason": None,
                          "tokens": None, "usage": "measured", "cost_usd": None}
        if task is None:  # the planner and a combined review hold the job's lane while they run
            self._enter(t, JOB_LANE, None, "planning" if role == "assigner" else "reviewing", run, None)
        elif role == "builder" and task in self.tasks:
            from pilothouse.core.queries.task_figures import attempt_after_run

            info = self.tasks[task]
            info["attempts"] = attempt_after_run(info["attempts"], data)
            if data.get("mode") != "resume":
                info["started"] = t  # a fresh attempt: its elapsed time starts here (the store's started_at)
        cur = self.open.get(task or JOB_LANE)
        if cur is not None and cur["run"] is None:
            cur["run"] = run

    def _run_finished(self, t: float, run: str, data: dict[str, Any]) -> None:
        info = self.runs.get(run)
        if info is None:
            return
        tokens = data.get("tokens")
        cost = data.get("cost_usd")
        # a new dict, not an update: a copy of the fold made earlier shares the old one
        self.runs[run] = info = {
            **info, "end": t, "verdict": data.get("verdict"), "reason": data.get("reason") or data.get("error"),
            "tokens": tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
            "usage": data.get("usage") if data.get("usage") in ("measured", "estimated", "unknown") else "measured",
            "cost_usd": float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None}
        if info["task"] is None:
            cur = self.open.get(JOB_LANE)
            if cur is not None and cur["run"] == run:
                self._leave(t, JOB_LANE)

    def _gate_finished(self, t: float, ev: dict[str, Any], task: str | None, data: dict[str, Any]) -> None:
        gate = self.open_gate.pop(task, None)
        self.open_gate_at.pop(task, None)
        if gate is None:  # a gate.finished with no start seen: a gate of its own, of no length
            gate = {"task": task, "level": data.get("level"), "where": data.get("where"), "start": t}
            self.gates.append(gate)
        duration = data.get("duration_s")
        gate.update(passed=bool(data.get("passed")), end=t, reason=data.get("reason"),
                    counts=data.get("counts") if isinstance(data.get("counts"), dict) else None,
                    duration_s=float(duration) if isinstance(duration, (int, float)) else t - gate["start"])
        if not data.get("passed"):
            self._mark("gate_failed", t, ev, f"gate {data.get('level') or ''} failed: {data.get('reason') or ''}")
        if task is None:
            self._leave(t, JOB_LANE)

    def _problem(self, t: float, ev: dict[str, Any], kind: str, task: str | None, data: dict[str, Any]) -> None:
        code = data.get("code")
        if not isinstance(code, str):
            return
        if kind == "problem.opened":
            self.problems[code] = {"code": code, "task": task, "kind": data.get("kind"),
                                   "summary": data.get("summary"), "opened": t, "reply": None, "words": None,
                                   "who": None, "answered": None, "outcome": None, "closed": None}
            self._mark("problem_opened", t, ev, f"{code} {data.get('kind') or ''}: {data.get('summary') or ''}")
        elif kind == "problem.answered" and code in self.problems:
            self.problems[code].update(reply=data.get("reply"), words=data.get("words"), who=data.get("who"),
                                       answered=t)
            self._mark("problem_answered", t, ev, f"{code} {data.get('reply') or ''} by {data.get('who') or '?'}")
        elif kind == "problem.closed" and code in self.problems:
            self.problems[code].update(outcome=data.get("outcome") or data.get("reason"), closed=t)

    def _mark(self, kind: str, t: float, ev: dict[str, Any], text: object) -> None:
        task = ev.get("task")
        self.marks.append({"kind": kind, "at": t, "task": task, "text": text, "seq": int(ev.get("seq") or 0)})

    # -- the picture ------------------------------------------------------------------------------

    def snapshot(self, by: Literal["slot", "task"] = "slot", until: float | None = None) -> Timeline:
        """The picture of what was folded; `until`: the moment it is of (its end; default: the job's
        last moment, the span core/queries/moments.py gives), to which a task still active counts."""
        from pilothouse.core.queries.timeline_view import snapshot

        return snapshot(self, by, until)


def read(events_path: Any, job: str, by: Literal["slot", "task"] = "slot") -> Timeline:
    """The job's timeline from its log (through the event index: only the events the fold reads)."""
    return fold_of(events_path, job).snapshot(by)


def fold_of(events_path: Any, job: str) -> TimelineFold:
    from pilothouse.core.state.event_index import EventLookup

    with EventLookup(events_path) as lookup:
        fold = TimelineFold(job).extend(lookup.select(job, types=TYPES))
        fold.tail = _ts((lookup.bounds(job)[1] or {}).get("ts"))
        if any(r["end"] is not None and r["cost_usd"] is None for r in fold.runs.values()):
            # a log from before run.finished carried the cost: the runs' last usage lines have it
            for ev in lookup.select(job, types=("run.usage",)):
                info = fold.runs.get(str(ev.get("run")))
                data = ev.get("data") or {}
                cost = data.get("cost_usd")
                if info is not None and info["cost_usd"] is None and data.get("final") and isinstance(cost, (int, float)):
                    fold.runs[info["run"]] = {**info, "cost_usd": float(cost)}
    return fold
