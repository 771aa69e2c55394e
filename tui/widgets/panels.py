"""The dashboard's tables: jobs, tasks of the selected job, providers and quota, problems.

Each turns query rows (core/queries/work.py, core/queries/problems.py) into keyed cells. Times are
computed against the app's clock, so snapshots are deterministic and elapsed/countdown cells
tick in place.
"""

from __future__ import annotations

import re
from datetime import datetime

from pilothouse.core.queries.problems import ProviderRow, ReplyRow
from pilothouse.core.queries.work import TASK_ACTIVE, JobRow, TaskRow, depth
from pilothouse.core.state.events import parse_ts
from pilothouse.core.stops.problems import Problem
from pilothouse.tui import format as fmt
from pilothouse.tui import keymap
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text

Pauses = dict[tuple[str, str | None], list[tuple[str, str | None]]]


class JobsTable(KeyedTable):
    COLUMNS = (
        Col("job", "job", 10, flex=1), Col("state", "state", 9), Col("rev", "rev", 3),
        Col("tasks", "tasks", 5), Col("tokens", "tokens", 6), Col("elapsed", "elapsed", 7),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="jobs-table", **kwargs)  # type: ignore[arg-type]
        self.jobs: dict[str, JobRow] = {}
        self.pauses: Pauses = {}  # the dashboard's (Queries.pauses): time spent waiting for the operator
        self.busy: dict[str, list[tuple[str, str | None]]] = {}  # Queries.busy: each job's runs

    def elapsed(self, j: JobRow, now: datetime) -> str:
        # a blocked job waits for the operator: its time stops where it blocked
        end = j.updated_at if j.state == "blocked" else j.finished_at
        return fmt.worked(j.created_at, end, now, self.pauses.get((j.job, None), ()), self.busy.get(j.job, ()))

    def cells(self, j: JobRow, now: datetime) -> dict[str, Cell]:
        rev = str(j.revision) + ("*" if j.planned_revision < j.revision and not j.final else "")
        return {"job": j.job, "state": fmt.state_text(j.state), "rev": rev,
                "tasks": f"{j.done}/{j.total}", "tokens": fmt.tokens(j.tokens, j.usage), "elapsed": self.elapsed(j, now)}

    def show(self, jobs: list[JobRow], now: datetime) -> None:
        self.jobs = {j.job: j for j in jobs}
        self.set_rows([(j.job, self.cells(j, now)) for j in jobs])

    def put(self, j: JobRow, now: datetime) -> None:
        self.jobs[j.job] = j
        self.upsert(j.job, self.cells(j, now))

    def tick(self, now: datetime) -> None:
        for j in self.jobs.values():
            if not j.final and j.state != "blocked" and j.job in self.rows:
                self.set_cell(j.job, "elapsed", self.elapsed(j, now))


class TasksTable(KeyedTable):
    COLUMNS = (
        Col("task", "task", 12, flex=2, fit=True), Col("kind", "kind", 15, wide_only=True),
        Col("state", "state", 9), Col("worker", "worker", 13, fit=True), Col("att", "att", 3, wide_only=True),
        Col("activity", "activity", 12, flex=3),
        Col("tokens", "tokens", 6), Col("elapsed", "elapsed", 7), Col("deps", "deps", 10, flex=1, wide_only=True),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="tasks-table", **kwargs)  # type: ignore[arg-type]
        self.job: str | None = None
        self.tasks: dict[str, TaskRow] = {}
        self._depth: dict[str, int] = {}
        self.pauses: Pauses = {}

    def elapsed(self, t: TaskRow, now: datetime) -> str:
        if not t.started_at:
            return ""
        end = t.updated_at if t.state not in TASK_ACTIVE else None
        return fmt.worked(t.started_at, end, now, self.pauses.get((t.job, t.task), ()))

    def cells(self, t: TaskRow, now: datetime) -> dict[str, Cell]:
        d = self._depth.get(t.task, 0)
        name = ("  " * (d - 1) + "└ " if d > 0 else "") + t.task
        # activity and reason quote the worker's words
        activity: Cell = fmt.words(t.activity or "")
        if t.state in ("stopped", "waiting", "blocked", "needs_replan") and t.reason:
            activity = Text(fmt.words(t.reason), style="yellow" if t.state == "waiting" else "red")
        elif t.state not in TASK_ACTIVE and not t.activity:
            activity = Text(fmt.words(t.reason or ""), style="dim")
        return {"task": name, "kind": t.kind, "state": fmt.state_text(t.state), "worker": t.worker,
                "att": str(t.attempt) if t.attempt else "", "activity": activity,
                "tokens": fmt.tokens(t.tokens, t.usage) if t.tokens or t.usage == "unknown" else "",
                "elapsed": self.elapsed(t, now),
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
                self.set_cell(t.task, "elapsed", self.elapsed(t, now))


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
                rows.append((f"{p.provider}\t{w.window}", {"provider": name if i == 0 else "", "window": w.window,
                                                           **self.window_cells(p, i, now)}))
        self.set_rows(rows)

    @staticmethod
    def window_cells(p: ProviderRow, i: int, now: datetime) -> dict[str, Cell]:
        """What a window says at `now`: a reset time that has passed is not a countdown any more. A
        window that reset is a new one (its old percentage no longer holds: `new`); a blocked one
        whose reset passed waits for the check that proves the provider back (`check due`)."""
        w = p.windows[i]
        reset_at = parse_ts(w.resets_at)
        passed = reset_at is not None and reset_at <= now
        if passed and not w.blocked:
            used: Cell = Text("new window", style="dim")
            reset: Cell = Text("—", style="dim")
        else:
            pct = "  ?" if w.used_pct is None else f"{w.used_pct:3.0f}%"
            used = fmt.bar(w.used_pct, 6, w.blocked) + Text(f" {pct}")
            if passed:
                reset = Text("passed", style="yellow")
            else:
                reset = fmt.countdown(w.resets_at, now) if w.resets_at else Text("unknown", style="dim")
        check: Cell = ""
        if i == 0 and p.next_check_at:
            due = fmt.countdown(p.next_check_at, now)
            check = Text("due", style="yellow") if due == "now" else due
        return {"used": used, "reset": reset, "check": check}

    def tick(self, now: datetime) -> None:
        """The live countdowns (only called while the panel is on screen); a reset that passes
        changes what its window says, not only the number."""
        for p in self.providers:
            for i, w in enumerate(p.windows):
                key = f"{p.provider}\t{w.window}"
                if key not in self.rows:
                    continue
                for column, value in self.window_cells(p, i, now).items():
                    self.set_cell(key, column, value)


def replies_text(replies: list[str], width: int = 0, keys: dict[str, str] | None = None) -> Text:
    """Each reply with its key marked (`keys`: the operator's, reply → key; the defaults otherwise);
    when they do not fit `width`, the keys alone (the dialog and the footer name them in full)
    rather than a cut that loses the last one."""
    key_of = {**fmt.REPLY_KEYS, **(keys or {})}
    out = Text()
    for n, r in enumerate(replies):
        if n:
            out.append(" ")
        key = key_of.get(r)
        if key:
            out.append(key, style="bold reverse")
        out.append(r if not key else r[1:] if r.startswith(key) else f" {r}")
    if width and out.cell_len > width:
        out = Text(" ").join(Text(key_of.get(r, r[:1]), style="bold reverse") for r in replies)
    return out


_FAILING = re.compile(r"^(FAILED |FAIL:|ERROR:? |E +|.*Error: |error(\[\w+\])?: |.*panicked at |--- FAIL)")


def _weakening(w: dict[str, object]) -> str:
    path, detail, kind = str(w.get("path") or ""), str(w.get("detail") or ""), str(w.get("kind") or "")
    count = re.match(r"(\d+) assertion", detail)
    short = {"test_deleted": "deleted", "skip_added": "skip added", "settings_changed": "changed"}.get(kind)
    if kind == "assertions_removed" and count:
        short = f"-{count.group(1)} assert{'s' * (count.group(1) != '1')}"
    text = short or detail or kind.replace("_", " ")
    return f"{path} {text}" if path else text


def headline(p: Problem) -> str:
    """What tells this problem apart from the others, first, for one table cell: the weakened files
    and counts, the failing test, the budget's figures, the files asked for; else the summary
    without the `command` it quotes (a long command filled the cell)."""
    ev = p.evidence
    weakened = [w for w in ev.get("weakened") or [] if isinstance(w, dict)]
    if p.kind == "gate_weakened" and weakened:
        more = f" +{len(weakened) - 2}" if len(weakened) > 2 else ""
        return fmt.words(", ".join(_weakening(w) for w in weakened[:2])) + more + " · gate weakened"
    tail = ev.get("output_tail") or ev.get("gate_output")
    if isinstance(tail, str):
        failing = [ln.strip() for ln in tail.splitlines() if _FAILING.match(ln.strip())]
        if failing:
            line = fmt.words(failing[-1 if failing[-1].startswith("E ") else 0])
            return re.sub(r"^(FAILED|FAIL:|ERROR:?) +", "", line)
    if p.kind == "budget" and isinstance(ev.get("used_tokens"), int) and isinstance(ev.get("cap"), int):
        return f"{fmt.tokens(ev['used_tokens'])} of {fmt.tokens(ev['cap'])} tokens · budget"
    if p.kind == "needs_files" and isinstance(ev.get("needs_files"), list):
        return "asks for " + ", ".join(fmt.words(f) for f in ev["needs_files"][:3])
    if p.kind == "builder_blocked" and ev.get("blocked_reason"):
        return f"blocked: {fmt.words(ev['blocked_reason'])}"
    return " ".join(re.sub(r"`[^`]*`", "", fmt.words(p.summary)).split())


class ProblemsTable(KeyedTable):
    COLUMNS = (
        Col("code", "code", 6), Col("job", "job", 10, flex=1, fit=True, wide_only=True),
        Col("task", "task", 12, fit=True), Col("what", "what happened", 16, flex=3), Col("replies", "replies", 9, wide=28),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(id="problems-table", **kwargs)  # type: ignore[arg-type]
        self.problems: dict[str, Problem] = {}
        self.pending: dict[str, ReplyRow] = {}  # code → the answer the supervisor has not taken yet

    def show(self, problems: list[Problem], pending: dict[str, ReplyRow] | None = None,
             stopped: bool = False) -> None:
        self.problems = {p.code: p for p in problems}
        self.pending = dict(pending or {})
        self.stopped = stopped
        self.set_rows([(p.code, self.cells(p, self.pending.get(p.code), stopped)) for p in problems])

    def relaid(self, rows: list[tuple[str, dict[str, Cell]]]) -> list[tuple[str, dict[str, Cell]]]:
        # the replies cell is worded for its column's width
        return [(code, self.cells(self.problems[code], self.pending.get(code), getattr(self, "stopped", False)))
                if code in self.problems else (code, cells) for code, cells in rows]

    def _task_cell(self, p: Problem) -> str:
        """Narrow (no job column): the task alone, or job/task when the problems are of several jobs."""
        if p.task is None:
            return f"({p.job})"
        narrow = bool(self._layout) and "job" not in dict(self._layout)
        if narrow and len({q.job for q in self.problems.values()}) > 1:
            return f"{p.job}/{p.task}"
        return p.task

    def cells(self, p: Problem, answer: ReplyRow | None, stopped: bool) -> dict[str, Cell]:
        if answer is None:
            width = dict(self._layout).get("replies", 0)
            return {"code": Text(p.code, style="bold"), "job": p.job, "task": self._task_cell(p),
                    "what": headline(p), "replies": replies_text(p.replies, width, self._reply_keys())}
        # answered, not yet taken: the reply keys are gone; say who must act (S when it is stopped)
        waiting = "waiting for the supervisor" + (" (stopped)" if stopped else "")
        return {"code": Text(p.code, style="dim"), "job": p.job, "task": p.task or f"({p.job})",
                "what": fmt.styled(waiting, "yellow") + fmt.styled(f" · {headline(p)}", "dim"),
                "replies": fmt.styled(f"✓ {answer.reply}", "green")
                + fmt.styled(f" · {self._start_key()} starts it" if stopped else " · waiting", "yellow")}

    def _start_key(self) -> str:
        return keymap.shown(self.app, "supervisor.toggle", "S")[0]

    def _reply_keys(self) -> dict[str, str]:
        """The keys the operator's cockpit.yaml gives the replies (problem.<reply>), as they press them."""
        return {reply: keymap.shown(self.app, f"problem.{reply}", key)[0] for reply, key in fmt.REPLY_KEYS.items()}

    @property
    def current(self) -> Problem | None:
        key = self.current_key
        return self.problems.get(key) if key else None
