"""The dashboard's tables: jobs, tasks of the selected job, providers and quota, problems.

Each turns query rows (core/queries/work.py, core/queries/problems.py) into keyed cells. Times are
computed against the app's clock, so snapshots are deterministic and elapsed/countdown cells
tick in place.
"""

from __future__ import annotations

from datetime import datetime

from pilothouse.core.queries.problems import ProviderRow, ReplyRow
from pilothouse.core.queries.work import TASK_ACTIVE, JobRow, TaskRow, depth
from pilothouse.core.stops.problems import Problem
from pilothouse.tui import format as fmt
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text


class JobsTable(KeyedTable):
    COLUMNS = (
        Col("job", "job", 10, flex=1), Col("state", "state", 9), Col("rev", "rev", 3),
        Col("tasks", "tasks", 5), Col("tokens", "tokens", 6), Col("elapsed", "elapsed", 7),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="jobs-table", **kwargs)  # type: ignore[arg-type]
        self.jobs: dict[str, JobRow] = {}

    @staticmethod
    def cells(j: JobRow, now: datetime) -> dict[str, Cell]:
        rev = str(j.revision) + ("*" if j.planned_revision < j.revision and not j.final else "")
        return {"job": j.job, "state": fmt.state_text(j.state), "rev": rev,
                "tasks": f"{j.done}/{j.total}", "tokens": fmt.tokens(j.tokens, j.usage),
                "elapsed": fmt.elapsed(j.created_at, j.finished_at, now)}

    def show(self, jobs: list[JobRow], now: datetime) -> None:
        self.jobs = {j.job: j for j in jobs}
        self.set_rows([(j.job, self.cells(j, now)) for j in jobs])

    def put(self, j: JobRow, now: datetime) -> None:
        self.jobs[j.job] = j
        self.upsert(j.job, self.cells(j, now))

    def tick(self, now: datetime) -> None:
        for j in self.jobs.values():
            if not j.final and j.job in self.rows:
                self.set_cell(j.job, "elapsed", fmt.elapsed(j.created_at, j.finished_at, now))


class TasksTable(KeyedTable):
    COLUMNS = (
        Col("task", "task", 12, flex=2), Col("kind", "kind", 15, wide_only=True), Col("state", "state", 9),
        Col("worker", "worker", 13), Col("att", "att", 3, wide_only=True), Col("activity", "activity", 12, flex=3),
        Col("tokens", "tokens", 6), Col("elapsed", "elapsed", 7), Col("deps", "deps", 10, flex=1, wide_only=True),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="tasks-table", **kwargs)  # type: ignore[arg-type]
        self.job: str | None = None
        self.tasks: dict[str, TaskRow] = {}
        self._depth: dict[str, int] = {}

    def cells(self, t: TaskRow, now: datetime) -> dict[str, Cell]:
        d = self._depth.get(t.task, 0)
        name = ("  " * (d - 1) + "└ " if d > 0 else "") + t.task
        end = t.updated_at if t.state not in TASK_ACTIVE else None
        activity: Cell = t.activity or ""
        if t.state in ("stopped", "waiting", "blocked", "needs_replan") and t.reason:
            activity = Text(t.reason, style="yellow" if t.state == "waiting" else "red")
        elif t.state not in TASK_ACTIVE and not t.activity:
            activity = Text(t.reason or "", style="dim")
        return {"task": name, "kind": t.kind, "state": fmt.state_text(t.state), "worker": t.worker,
                "att": str(t.attempt) if t.attempt else "", "activity": activity,
                "tokens": fmt.tokens(t.tokens, t.usage) if t.tokens or t.usage == "unknown" else "",
                "elapsed": fmt.elapsed(t.started_at, end, now) if t.started_at else "",
                "deps": ",".join(t.depends_on)}

    def show(self, job: str | None, tasks: list[TaskRow], now: datetime) -> None:
        if job != self.job:
            self._rows.clear()
        self.job = job
        self.tasks = {t.task: t for t in tasks}
        self._depth = depth(tasks)
        self.set_rows([(t.task, self.cells(t, now)) for t in tasks])

    def put(self, t: TaskRow, now: datetime) -> None:
        self.tasks[t.task] = t
        self.upsert(t.task, self.cells(t, now))

    def tick(self, now: datetime) -> None:
        for t in self.tasks.values():
            if t.state in TASK_ACTIVE and t.started_at and t.task in self.rows:
                self.set_cell(t.task, "elapsed", fmt.elapsed(t.started_at, None, now))


class ProvidersTable(KeyedTable):
    COLUMNS = (
        Col("provider", "provider", 17, flex=1), Col("window", "window", 9), Col("used", "used", 11),
        Col("reset", "resets", 7), Col("check", "check", 6),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="providers-table", **kwargs)  # type: ignore[arg-type]
        self.providers: list[ProviderRow] = []

    def show(self, providers: list[ProviderRow], now: datetime) -> None:
        # a blocked provider first: on a small terminal the panel shows its first rows only
        providers = sorted(providers, key=lambda p: not p.windows or p.available(now))
        self.providers = providers
        rows: list[tuple[str, dict[str, Cell]]] = []
        for p in providers:
            # what its model cannot do (the capability probe): it takes no builder's work
            lacks = fmt.styled(" ✗" + ",".join(x.replace("tools_auto", "tools") for x in p.lacks), "bold red") \
                if p.lacks else ""
            if not p.windows:
                rows.append((p.provider, {"provider": fmt.styled("○ ", "dim") + fmt.provider_text(p.provider) + lacks,
                                          "window": Text("no report", style="dim")}))
                continue
            ok = p.available(now)
            name = fmt.styled("● ", "green" if ok else "bold red") + fmt.provider_text(p.provider) + lacks
            for i, w in enumerate(p.windows):
                pct = "  ?" if w.used_pct is None else f"{w.used_pct:3.0f}%"
                rows.append((f"{p.provider}\t{w.window}", {
                    "provider": name if i == 0 else "", "window": w.window,
                    "used": fmt.bar(w.used_pct, 6, w.blocked) + Text(f" {pct}"),
                    "reset": fmt.countdown(w.resets_at, now) if w.resets_at else Text("unknown", style="dim"),
                    "check": fmt.countdown(p.next_check_at, now) if i == 0 and p.next_check_at else ""}))
        self.set_rows(rows)

    def tick(self, now: datetime) -> None:
        """The live countdowns (only called while the panel is on screen)."""
        for p in self.providers:
            for i, w in enumerate(p.windows):
                key = f"{p.provider}\t{w.window}"
                if key not in self.rows:
                    continue
                if w.resets_at:
                    self.set_cell(key, "reset", fmt.countdown(w.resets_at, now))
                if i == 0 and p.next_check_at:
                    self.set_cell(key, "check", fmt.countdown(p.next_check_at, now))


def replies_text(replies: list[str]) -> Text:
    out = Text()
    for n, r in enumerate(replies):
        if n:
            out.append(" ")
        key = fmt.REPLY_KEYS.get(r)
        if key:
            out.append(key, style="bold reverse")
        out.append(r if not key else r[1:] if r.startswith(key) else f" {r}")
    return out


class ProblemsTable(KeyedTable):
    COLUMNS = (
        Col("code", "code", 6), Col("job", "job", 10, flex=1), Col("task", "task", 12, flex=1),
        Col("what", "what happened", 16, flex=3), Col("replies", "replies", 22),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="problems-table", **kwargs)  # type: ignore[arg-type]
        self.problems: dict[str, Problem] = {}
        self.pending: dict[str, ReplyRow] = {}  # code → the answer the supervisor has not taken yet

    def show(self, problems: list[Problem], pending: dict[str, ReplyRow] | None = None,
             stopped: bool = False) -> None:
        self.problems = {p.code: p for p in problems}
        self.pending = dict(pending or {})
        self.set_rows([(p.code, self.cells(p, self.pending.get(p.code), stopped)) for p in problems])

    @staticmethod
    def cells(p: Problem, answer: ReplyRow | None, stopped: bool) -> dict[str, Cell]:
        if answer is None:
            return {"code": Text(p.code, style="bold"), "job": p.job, "task": p.task or "(job)", "what": p.summary,
                    "replies": replies_text(p.replies)}
        # answered, not yet taken: the reply keys are gone; say who must act (S when it is stopped)
        waiting = "waiting for the supervisor" + (" (stopped)" if stopped else "")
        return {"code": Text(p.code, style="dim"), "job": p.job, "task": p.task or "(job)",
                "what": fmt.styled(waiting, "yellow") + fmt.styled(f" · {p.summary}", "dim"),
                "replies": fmt.styled(f"✓ {answer.reply}", "green")
                + fmt.styled(" · S starts it" if stopped else " · waiting", "yellow")}

    @property
    def current(self) -> Problem | None:
        key = self.current_key
        return self.problems.get(key) if key else None
