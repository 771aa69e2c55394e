"""The timeline's values (core/queries/timeline.py folds a job's events into them; timeline_view.py
draws them as lanes and sums): pydantic models and the small readers of event fields they share."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pilothouse.core.state.events import event_seconds
from pilothouse.providers.untrusted import UntrustedText
from pydantic import BaseModel, Field

BarState = Literal["planning", "building", "gating", "reviewing", "merging", "waiting_operator", "waiting_quota"]
STATES: tuple[str, ...] = ("planning", "building", "gating", "reviewing", "merging", "waiting_operator",
                           "waiting_quota")
STATE_WORDS = {"planning": "planning", "building": "building", "gating": "gating", "reviewing": "reviewing",
               "merging": "merging", "waiting_operator": "waiting for the operator",
               "waiting_quota": "waiting for quota"}
# a task state that holds a worker slot, and what its bar shows; every other state frees the slot
_BAR_OF = {"running": "building", "gating": "gating", "reviewing": "reviewing", "approved": "merging",
           "merging": "merging", "stopped": "waiting_operator", "waiting": "waiting_quota"}
# the events the fold reads (the index serves just these: the activity and usage lines, nearly all of
# a big log, are left unread)
TYPES = frozenset({
    "job.created", "job.planned", "job.started", "job.waiting", "job.blocked", "job.failed", "job.accepted",
    "job.cancelled", "job.shipped", "job.revised", "job.state", "task.state", "run.started", "run.finished", "gate.started",
    "gate.finished", "merge.finished", "merge.rolled_back", "review.finished", "problem.opened",
    "problem.answered", "problem.closed", "budget.exceeded"})
# the job's state after each job event that carries none in `data.state` (the supervisor's set_job puts
# the state it wrote there; `job.state` is one with no other name); None: the event leaves it as it was
# (a `job.waiting` of a planner tried again changes nothing in state.db)
_JOB_STATE: dict[str, str | None] = {
              "job.created": "created", "job.planned": "running", "job.started": "running", "job.waiting": None,
              "job.blocked": "blocked", "job.failed": "failed", "job.accepted": "accepted",
              "job.cancelled": "cancelled", "job.shipped": "shipped", "job.revised": "planning", "job.state": None}
JOB_LANE = "(job)"  # the lane of the job's own runs: its planner, its combined review, its full gate


def role_of(role: str | None, mode: str | None, attempt: int | None) -> str:
    """A run's role as `pilothouse usage` groups them (core/queries/usage.py ROLES)."""
    if role == "assigner":
        return "planner"
    if role == "builder":
        return "resumes" if mode == "resume" else ("retries" if (attempt or 1) > 1 else "builders")
    return "reviewers" if role == "reviewer" else "testers"


class Run(BaseModel):
    run: str
    task: str | None
    role: str                       # as in `usage`: planner, builders, retries, resumes, reviewers, testers
    mode: str | None = None
    provider: str | None = None
    model: str | None = None
    attempt: int = 1
    start: datetime
    end: datetime | None = None     # None: still going
    verdict: str | None = None
    reason: UntrustedText | None = None
    tokens: int | None = None
    usage: str = "measured"
    cost_usd: float | None = None


class Bar(BaseModel):
    lane: str
    task: str | None
    state: BarState
    start: datetime
    end: datetime | None = None     # None: still in this state at the snapshot
    run: str | None = None
    role: str | None = None
    provider: str | None = None
    reason: UntrustedText | None = None
    # the run's figures on the bar where its work was done (building, reviewing, planning), else None
    tokens: int | None = None
    usage: str | None = None
    cost_usd: float | None = None


MarkKind = Literal["problem_opened", "problem_answered", "gate_failed", "merge", "merge_rolled_back", "quota_wait"]


class Mark(BaseModel):
    kind: MarkKind
    at: datetime
    task: str | None = None
    lane: str | None = None
    text: UntrustedText = UntrustedText("")
    seq: int = 0


class Lane(BaseModel):
    key: str
    label: str
    bars: list[Bar] = Field(default_factory=list)


class GateRun(BaseModel):
    task: str | None
    level: str | None
    where: str | None
    passed: bool | None = None      # None: still running
    start: datetime
    end: datetime | None = None
    duration_s: float | None = None
    counts: dict[str, Any] | None = None
    reason: UntrustedText | None = None


class Review(BaseModel):
    task: str | None
    round: int | None
    overall: str | None
    findings: int = 0
    summaries: list[UntrustedText] = Field(default_factory=list)
    at: datetime


class Problem(BaseModel):
    code: str
    task: str | None
    kind: str | None
    summary: UntrustedText
    opened: datetime
    reply: str | None = None
    words: UntrustedText | None = None
    who: UntrustedText | None = None
    answered: datetime | None = None
    outcome: UntrustedText | None = None


class TaskOutcome(BaseModel):
    task: str
    state: str
    reason: UntrustedText | None = None
    attempts: int = 0               # the attempt it is on, as `job status` counts (core/queries/task_figures.py)
    elapsed_s: float | None = None  # its current attempt's time, less its waits for the operator (the same)
    review_round: int = 0
    merged_sha: str | None = None
    tokens: int = 0
    usage: str = "measured"
    cost_usd: float = 0.0
    cost_label: str = "measured"    # what its cost is shown with: `simulator` for the simulator's runs


class Timeline(BaseModel):
    job: str
    state: str
    start: datetime | None
    end: datetime | None            # the last event folded (or the moment asked for)
    seq: int = 0                    # the last event folded
    lanes: list[Lane]               # by slot, or by task (`snapshot(by=...)`)
    marks: list[Mark]
    runs: list[Run]
    tasks: list[TaskOutcome]
    gates: list[GateRun]
    reviews: list[Review]
    problems: list[Problem]
    head: str | None = None         # the accepted head of the job's line
    shipped: str | None = None      # the commit `ship` landed on the base branch
    tokens: int = 0
    usage: str = "measured"
    cost_usd: float = 0.0

    def bar_at(self, lane: int, index: int) -> Bar | None:
        try:
            return self.lanes[lane].bars[index]
        except IndexError:
            return None


def _text(value: object) -> UntrustedText | None:
    return _texter()(value)


def _texter() -> Any:
    """`_text` with the configured redaction looked up once, and each distinct string made inert once: a
    snapshot of 500 tasks has thousands of strings, most of them alike, and finding the configured
    keys costs more than redacting."""
    from pilothouse.providers.redact import configured_redactor
    from pilothouse.providers.untrusted import inert

    redact = configured_redactor().redact
    seen: dict[str, UntrustedText] = {}

    def text(value: object) -> UntrustedText | None:
        if value is None or value == "":
            return None
        raw = str(value)
        done = seen.get(raw)
        if done is None:
            done = seen[raw] = inert(redact(raw), lines=False)
        return done

    return text


_ts = event_seconds


def _dt(t: float | None) -> datetime | None:
    from datetime import UTC

    return None if t is None else datetime.fromtimestamp(t, UTC)
