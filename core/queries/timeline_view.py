"""A folded timeline (core/queries/timeline.py) as pydantic values: lanes per worker slot or per task,
and the sums a report shows (by task, by role, by provider), each with its usage label and, for its
cost, the label a cost is shown with (`simulator` when the simulator's runs make it: $0 there is no
price of anything)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pilothouse.core.queries.timeline_model import (
    JOB_LANE,
    Bar,
    GateRun,
    Lane,
    Mark,
    Problem,
    Review,
    Run,
    TaskOutcome,
    Timeline,
    _dt,
    _texter,
)

if TYPE_CHECKING:
    from pilothouse.core.queries.timeline import TimelineFold

_WORK = {"building", "reviewing", "planning"}  # where a run's tokens were spent


def snapshot(fold: TimelineFold, by: Literal["slot", "task"] = "slot", until: float | None = None) -> Timeline:
    from pilothouse.core.queries.moments import span
    from pilothouse.core.queries.task_figures import figures
    from pilothouse.providers.usage import combine, cost_label

    first, last = span(fold.first, fold.last, fold.tail)
    end = until if until is not None else last
    figured = figures(fold, end)
    _text = _texter()
    runs = {k: Run(**{**r, "start": _dt(r["start"]), "end": _dt(r["end"]), "reason": _text(r["reason"])})
            for k, r in fold.runs.items()}
    lanes: dict[str, Lane] = {}
    if by == "slot":
        for n in range(fold.slots):
            lanes[str(n)] = Lane(key=str(n), label=f"slot {n + 1}")
    else:
        lanes[JOB_LANE] = Lane(key=JOB_LANE, label=JOB_LANE)
        for task in fold.tasks:
            lanes[task] = Lane(key=task, label=task)
    lane_of_task: dict[str | None, str] = {}
    for b in fold.bars:
        key = str(b["slot"]) if by == "slot" else (b["task"] or JOB_LANE)
        if key not in lanes:
            lanes[key] = Lane(key=key, label=key)
        lane_of_task[b["task"]] = key
        run = runs.get(b["run"]) if b["run"] else None
        work = run is not None and b["state"] in _WORK
        lanes[key].bars.append(Bar(
            lane=key, task=b["task"], state=b["state"], start=_dt(b["start"]), end=_dt(b["end"]), run=b["run"],
            role=run.role if run else None, provider=run.provider if run else None, reason=_text(b["reason"]),
            tokens=run.tokens if work and run else None, usage=run.usage if work and run else None,
            cost_usd=run.cost_usd if work and run else None))
    marks = [Mark(kind=m["kind"], at=_dt(m["at"]), task=m["task"], lane=lane_of_task.get(m["task"]),
                  text=_text(m["text"]) or "", seq=m["seq"]) for m in fold.marks]
    runs_of: dict[str | None, list[Run]] = {}  # grouped once: a scan of every run per task is 500 × 1,000
    for r in runs.values():
        runs_of.setdefault(r.task, []).append(r)
    tasks = []
    for name, info in fold.tasks.items():
        own = runs_of.get(name, [])
        usage = combine(_label(r) for r in own)
        attempts, elapsed = figured[name]
        tasks.append(TaskOutcome(
            task=name, state=info["state"], reason=_text(info["reason"]), attempts=attempts, elapsed_s=elapsed,
            review_round=info["review_round"], merged_sha=info["merged_sha"],
            tokens=sum(r.tokens or 0 for r in own), usage=usage,
            cost_usd=round(sum(r.cost_usd or 0.0 for r in own), 6),
            cost_label=cost_label(usage, (r.provider for r in own))))
    every = list(runs.values())
    return Timeline(
        job=fold.job, state=fold.state, start=_dt(first), end=_dt(end), seq=fold.seq,
        lanes=list(lanes.values()), marks=marks, runs=every, tasks=tasks,
        gates=[GateRun(**{**g, "start": _dt(g["start"]), "end": _dt(g.get("end")), "reason": _text(g.get("reason"))})
               for g in fold.gates],
        reviews=[Review(**{**r, "at": _dt(r["at"])}) for r in fold.reviews],
        problems=[Problem(code=p["code"], task=p["task"], kind=p["kind"], summary=_text(p["summary"]) or "",
                          opened=_dt(p["opened"]), reply=p["reply"], words=_text(p["words"]), who=_text(p["who"]),
                          answered=_dt(p["answered"]), outcome=_text(p["outcome"]))
                  for p in fold.problems.values()],
        head=fold.head, shipped=fold.shipped, tokens=sum(r.tokens or 0 for r in every),
        usage=combine(_label(r) for r in every), cost_usd=round(sum(r.cost_usd or 0.0 for r in every), 6))


def _label(run: Run) -> str:
    # a run still going counts what it reported so far, as `usage` does
    return run.usage if run.end is not None else "measured"


def sums(timeline: Timeline, key: Literal["role", "provider"]) -> list[dict[str, Any]]:
    """Tokens and cost by role (in `usage`'s order) or by provider, each sum with its labels."""
    from pilothouse.core.queries.usage import ROLES
    from pilothouse.providers.usage import combine, cost_label

    groups: dict[str, list[Run]] = {}
    for r in timeline.runs:
        groups.setdefault(str(getattr(r, key) or "?"), []).append(r)
    order = [k for k in ROLES if k in groups] if key == "role" else sorted(groups)
    total = sum(r.tokens or 0 for r in timeline.runs)
    out = []
    for k in order:
        rs = groups[k]
        tokens = sum(r.tokens or 0 for r in rs)
        usage = combine(_label(r) for r in rs)
        out.append({key: k, "runs": len(rs), "running": sum(r.end is None for r in rs), "tokens": tokens,
                    "usage": usage, "share": round(tokens / total, 4) if total else 0.0,
                    "cost_usd": round(sum(r.cost_usd or 0.0 for r in rs), 6),
                    "cost_label": cost_label(usage, (r.provider for r in rs))})
    return out
