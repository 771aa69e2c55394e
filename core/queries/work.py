"""Read-only queries over `.ai/runtime/state.db` for the cockpit and other views: jobs, tasks
and runs, and which rows a batch of events invalidates.

Views never write: they open the store read-only and re-read only the rows an event names
(`affected`), so a burst of events costs a handful of primary-key lookups, not a full reload.
Problems, replies, providers and the supervisor are read by the half in core/queries/problems.py,
which `Queries` extends (one connection for both).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.problems import ProblemQueries
from pilothouse.core.queries.task_figures import ACTIVE
from pilothouse.core.state.store import loads
from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.core.records.jobs import Job

# task states that no longer move on their own
TASK_FINAL = frozenset({"done", "skipped", "cancelled"})
TASK_ACTIVE = ACTIVE  # a task's elapsed time goes on counting in these (core/queries/task_figures.py)
JOB_FINAL = frozenset({"accepted", "shipped", "failed", "stopped"})


@dataclass(frozen=True)
class JobRow:
    job: str
    state: str
    revision: int
    planned_revision: int
    coordinator: str | None
    tokens: int
    reason: str | None
    created_at: str
    updated_at: str
    finished_at: str | None
    done: int = 0
    total: int = 0
    usage: str = "measured"  # how far to trust `tokens` (providers/usage.py): its runs' labels combined

    @property
    def final(self) -> bool:
        return self.state in JOB_FINAL


@dataclass(frozen=True)
class TaskRow:
    job: str
    task: str
    state: str
    kind: str
    depends_on: tuple[str, ...]
    attempt: int
    review_round: int
    provider: str | None
    model: str | None
    run_id: str | None
    session_id: str | None
    branch: str | None
    worktree: str | None
    commit_sha: str | None
    merged_sha: str | None
    activity: str | None
    tokens: int
    reason: str | None
    started_at: str | None
    updated_at: str
    usage: str = "measured"  # as JobRow.usage, over the task's runs
    base: str | None = None  # the commit its worktree started from (what its change is measured against)

    @property
    def worker(self) -> str:
        if not self.provider:
            return ""
        return f"{self.provider}/{self.model}" if self.model else self.provider

    @property
    def final(self) -> bool:
        return self.state in TASK_FINAL


@dataclass(frozen=True)
class RunRow:
    run_id: str
    job: str | None
    task: str | None
    role: str
    provider: str
    model: str | None
    mode: str
    attempt: int
    pid: int | None
    state: str
    verdict: dict[str, Any] | None
    tokens: int
    cost_usd: float
    log: str | None
    started_at: str
    finished_at: str | None

    @property
    def usage(self) -> str:
        """How far to trust `tokens`: measured, estimated or unknown (a run still going: measured so far)."""
        from pilothouse.providers.usage import label_of

        return label_of(self.verdict) if self.verdict is not None else "measured"


def usage_sql(where: str) -> str:
    """A subquery: the distinct usage labels of the finished runs `where` picks, comma-joined."""
    return ("(SELECT group_concat(DISTINCT CASE WHEN json_valid(r.verdict) THEN "
            f"json_extract(r.verdict, '$.usage') END) FROM runs r WHERE r.state = 'finished' AND {where})")


def usage_label(joined: str | None) -> str:
    from pilothouse.providers.usage import combine

    return combine((joined or "").split(","))


@dataclass
class Changes:
    """What a batch of events invalidates: the rows a view must re-read."""

    jobs: set[str] = field(default_factory=set)
    tasks: set[tuple[str, str]] = field(default_factory=set)
    task_lists: set[str] = field(default_factory=set)  # jobs whose task set changed
    runs: set[str] = field(default_factory=set)
    problems: bool = False
    providers: bool = False
    supervisor: bool = False

    def __bool__(self) -> bool:
        return bool(self.jobs or self.tasks or self.task_lists or self.runs or self.problems
                    or self.providers or self.supervisor)


def affected(events: Iterable[dict[str, Any]]) -> Changes:
    ch = Changes()
    for ev in events:
        etype = str(ev.get("type", ""))
        noun = etype.split(".", 1)[0]
        job, task, run = ev.get("job"), ev.get("task"), ev.get("run")
        if job:
            ch.jobs.add(job)  # tokens, done/total and state all roll up into the job row
            if task:
                ch.tasks.add((job, task))
        if run:
            ch.runs.add(run)
        if etype in ("task.defined", "job.planned", "job.revised", "job.created"):
            if job:
                ch.task_lists.add(job)
        if noun == "problem":
            ch.problems = True
        elif noun in ("quota", "provider"):
            ch.providers = True
        elif noun == "supervisor":
            ch.supervisor = True
        elif etype == "run.started":
            ch.providers = True  # a provider may appear for the first time
    return ch


class Queries(ProblemQueries):
    """Everything a view reads, through one read-only connection opened lazily."""

    # --- jobs ---------------------------------------------------------------------------------

    _JOB_SQL = (
        "SELECT j.*, "
        "(SELECT COUNT(*) FROM tasks t WHERE t.job = j.job AND t.state = 'done') AS done, "
        "(SELECT COUNT(*) FROM tasks t WHERE t.job = j.job AND t.state != 'cancelled') AS total, "
        + usage_sql("r.job = j.job") + " AS usages "
        "FROM jobs_state j"
    )

    @staticmethod
    def _job(r: sqlite3.Row) -> JobRow:
        return JobRow(job=r["job"], state=r["state"], revision=r["revision"],
                      planned_revision=r["planned_revision"], coordinator=r["coordinator"],
                      tokens=r["tokens"], reason=r["reason"], created_at=r["created_at"],
                      updated_at=r["updated_at"], finished_at=r["finished_at"], done=r["done"],
                      total=r["total"], usage=usage_label(r["usages"]))

    def jobs(self) -> list[JobRow]:
        """Jobs the supervisor knows, then jobs only written so far (`job create`, no supervisor yet)."""
        known = [self._job(r) for r in self._all(self._JOB_SQL + " ORDER BY j.created_at, j.job")]
        names = {j.job for j in known}
        if all(path.stem in names for path in self.layout.jobs_dir.glob("*.json")):
            # every record has runtime state: none need reading (nor the record models importing,
            # a good part of the cockpit's first paint)
            return known
        from pilothouse.core.records import jobs as core_jobs

        return known + [self._new(j) for j in core_jobs.list_jobs(self.layout) if j.name not in names]

    def job(self, name: str) -> JobRow | None:
        rows = self._all(self._JOB_SQL + " WHERE j.job = ?", (name,))
        if rows:
            return self._job(rows[0])
        from pilothouse.core.records import jobs as core_jobs

        try:
            return self._new(core_jobs.load_job(self.layout, name))
        except UserError:
            return None

    @staticmethod
    def _new(job: Job) -> JobRow:
        """A job record with no runtime state yet: shown as `new` until a supervisor takes it."""
        return JobRow(job=job.name, state="new", revision=job.revision if job.revisions else 1,
                      planned_revision=0, coordinator=None, tokens=0, reason="waiting for a supervisor",
                      created_at=job.created_at, updated_at=job.created_at, finished_at=None)

    # --- tasks --------------------------------------------------------------------------------

    @staticmethod
    def _task(r: sqlite3.Row) -> TaskRow:
        deps = loads(r["depends_on"], [])
        counters = loads(r["counters"], {})
        base = counters.get("base") if isinstance(counters, dict) else None
        return TaskRow(job=r["job"], task=r["task"], state=r["state"], kind=r["kind"],
                       depends_on=tuple(str(d) for d in deps) if isinstance(deps, list) else (),
                       attempt=r["attempt"], review_round=r["review_round"], provider=r["provider"],
                       model=r["model"], run_id=r["run_id"], session_id=r["session_id"],
                       branch=r["branch"], worktree=r["worktree"], commit_sha=r["commit_sha"],
                       merged_sha=r["merged_sha"], activity=r["activity"], tokens=r["tokens"],
                       reason=r["reason"], started_at=r["started_at"], updated_at=r["updated_at"],
                       usage=usage_label(r["usages"]), base=base if isinstance(base, str) else None)

    _TASK_SQL = "SELECT t.*, " + usage_sql("r.job = t.job AND r.task = t.task") + " AS usages FROM tasks t"

    def tasks(self, job: str) -> list[TaskRow]:
        return topo_order([self._task(r) for r in self._all(
            self._TASK_SQL + " WHERE t.job = ? ORDER BY t.rowid", (job,))])

    def task(self, job: str, task: str) -> TaskRow | None:
        rows = self._all(self._TASK_SQL + " WHERE t.job = ? AND t.task = ?", (job, task))
        return self._task(rows[0]) if rows else None

    # --- runs ---------------------------------------------------------------------------------

    @staticmethod
    def _run(r: sqlite3.Row) -> RunRow:
        verdict = loads(r["verdict"], None)
        return RunRow(run_id=r["run_id"], job=r["job"], task=r["task"], role=r["role"],
                      provider=r["provider"], model=r["model"], mode=r["mode"], attempt=r["attempt"],
                      pid=r["pid"], state=r["state"], verdict=verdict if isinstance(verdict, dict) else None,
                      tokens=r["tokens"], cost_usd=r["cost_usd"], log=r["log"],
                      started_at=r["started_at"], finished_at=r["finished_at"])

    def runs(self, job: str, task: str) -> list[RunRow]:
        return [self._run(r) for r in self._all(
            "SELECT * FROM runs WHERE job = ? AND task = ? ORDER BY started_at, run_id", (job, task))]

    def job_runs(self, job: str) -> list[RunRow]:
        """The job's own runs, of no task: its planner's, a combined review's."""
        return [self._run(r) for r in self._all(
            "SELECT * FROM runs WHERE job = ? AND task IS NULL ORDER BY started_at, run_id", (job,))]

    def run(self, run_id: str) -> RunRow | None:
        rows = self._all("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return self._run(rows[0]) if rows else None


def topo_order(tasks: list[TaskRow]) -> list[TaskRow]:
    """Tasks ordered so each follows its dependencies (stable otherwise); unknown deps ignored."""
    by_id = {t.task: t for t in tasks}
    out: list[TaskRow] = []
    seen: set[str] = set()

    def visit(t: TaskRow, stack: frozenset[str]) -> None:
        if t.task in seen or t.task in stack:
            return
        for d in t.depends_on:
            if d in by_id:
                visit(by_id[d], stack | {t.task})
        seen.add(t.task)
        out.append(t)

    for t in tasks:
        visit(t, frozenset())
    return out


def depth(tasks: list[TaskRow]) -> dict[str, int]:
    """Longest dependency chain above each task, for an indented tree."""
    by_id = {t.task: t for t in tasks}
    memo: dict[str, int] = {}

    def d(tid: str, stack: frozenset[str]) -> int:
        if tid in memo:
            return memo[tid]
        t = by_id.get(tid)
        if t is None or tid in stack:
            return -1
        val = 1 + max((d(x, stack | {tid}) for x in t.depends_on), default=-1)
        memo[tid] = val
        return val

    return {t.task: d(t.task, frozenset()) for t in tasks}


def run_log_paths(provider: str, run_id: str, log: str | None = None) -> dict[str, Path]:
    """The files dispatch writes for a run (docs/contracts.md)."""
    from pilothouse.providers.paths import logs_dir

    base = Path(log).with_suffix("") if log else logs_dir() / provider / run_id
    return {"events": base.with_suffix(".jsonl"), "stderr": base.with_suffix(".stderr.log"),
            "report": base.with_suffix(".report.md"), "verdict": base.with_suffix(".verdict.json")}
