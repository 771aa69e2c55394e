"""Job token budgets: `budgets.job_tokens` in project.yaml caps a job's recorded tokens.

Past the cap nothing new launches for the job; runs already going finish and their work is kept.
The operator gets one `budget` problem; `retry` after raising (or removing) the cap lifts it —
`problem act` refuses the retry while the cap is still below what the job has used.
The budget acts on estimated tokens too (a server that reports no usage would otherwise never
stop a job), and says when its count is one (providers/usage.py).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.stops.problems import Problem, _db, close_problem, open_problem


@dataclass
class BudgetState:
    job: str
    used: int
    cap: int | None
    usage: str = "measured"  # how far to trust `used`: its runs' labels combined

    @property
    def over(self) -> bool:
        return self.cap is not None and self.used >= self.cap

    @property
    def used_text(self) -> str:
        from pilothouse.providers.usage import tokens_text

        return tokens_text(self.used, self.usage)

    @property
    def reason(self) -> str:
        if self.cap is None:
            return f"job {self.job}: {self.used_text} used, no budget set"
        verb = "reached" if self.over else "within"
        mark = {"estimated": "~", "unknown": "≥"}.get(self.usage, "")
        how = {"estimated": ", estimated", "unknown": ", some not reported"}.get(self.usage, "")
        return (f"job {self.job}: {mark}{self.used} of {self.cap} tokens (budgets.job_tokens{how}) — "
                f"{verb} its budget")

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "used_tokens": self.used, "usage": self.usage, "cap": self.cap,
                "over": self.over, "reason": self.reason}


_HOW_COUNTED = {
    "estimated": " Part of that count is an estimate (the server reported no usage for some runs; "
                 "pilothouse counted their text at 4 characters a token).",
    "unknown": " Some runs' usage was reported by nobody, so the job has used at least that many.",
}


def job_usage(layout: RepoLayout, job: str, *, conn: sqlite3.Connection | None = None) -> str:
    """The label of the job's token count: its finished runs' usage labels combined."""
    from pilothouse.providers.usage import combine

    if conn is None and not layout.state_db.exists():
        return "measured"
    with _db(layout, conn) as db:
        rows = db.execute("SELECT DISTINCT CASE WHEN json_valid(verdict) THEN json_extract(verdict, '$.usage') END"
                          " FROM runs WHERE job = ? AND state = 'finished'", (job,)).fetchall()
    return combine(r[0] for r in rows)


def job_tokens(layout: RepoLayout, job: str, *, conn: sqlite3.Connection | None = None) -> int:
    """Tokens recorded for the job: the larger of the job's running total and its runs' sum
    (whichever the supervisor has updated last)."""
    if conn is None and not layout.state_db.exists():
        return 0
    with _db(layout, conn) as db:
        runs = db.execute("SELECT coalesce(sum(tokens), 0) FROM runs WHERE job = ?", (job,)).fetchone()[0]
        row = db.execute("SELECT tokens FROM jobs_state WHERE job = ?", (job,)).fetchone()
    return max(int(runs or 0), int(row["tokens"]) if row is not None else 0)


def budget_state(layout: RepoLayout, job: str, cap: int | None = None, *,
                 conn: sqlite3.Connection | None = None) -> BudgetState:
    """`cap` defaults to the project's budgets.job_tokens (read fresh: the operator may raise it)."""
    if cap is None:
        from pilothouse.core.records.project import job_token_cap  # pydantic: only when asked

        cap = job_token_cap(layout)
    return BudgetState(job, job_tokens(layout, job, conn=conn), cap, job_usage(layout, job, conn=conn))


def enforce(layout: RepoLayout, job: str, cap: int | None = None, *, now: datetime | None = None,
            conn: sqlite3.Connection | None = None, log: EventLog | None = None) -> Problem | None:
    """Supervisor side, before launching anything for `job`: None if it may launch, else the job's
    budget problem (opened, with a budget.exceeded event, the first time)."""
    state = budget_state(layout, job, cap, conn=conn)
    if not state.over:
        lifted(layout, job, state.cap, conn=conn, log=log)
        return None
    with _db(layout, conn) as db:
        existing = db.execute("SELECT code FROM problems WHERE job = ? AND kind = 'budget' AND state != 'closed'",
                              (job,)).fetchone()
    log = log or EventLog(layout.events)
    problem = open_problem(
        layout, job, None, "budget",
        f"Job {job} has used {state.used_text}, past its budget of {state.cap} (budgets.job_tokens): "
        "nothing new launches; the work so far is kept. Raise the cap in .ai/project.yaml, then retry."
        + _HOW_COUNTED.get(state.usage, ""),
        {"used_tokens": state.used, "usage": state.usage, "cap": state.cap, "file": ".ai/project.yaml",
         "field": "budgets.job_tokens"},
        now=now, conn=conn, log=log)
    if existing is None:
        log.append("budget.exceeded", job=job, data={**state.as_dict(), "code": problem.code})
    return problem


def lifted(layout: RepoLayout, job: str, cap: int | None, *, conn: sqlite3.Connection | None = None,
           log: EventLog | None = None) -> list[str]:
    """The job is under its budget again (the operator raised budgets.job_tokens, or removed it): its
    open budget problem closes as soon as the supervisor sees it, without waiting for a retry. One
    already answered is left to its answer."""
    with _db(layout, conn) as db:
        codes = [r["code"] for r in db.execute(
            "SELECT code FROM problems WHERE job = ? AND kind = 'budget' AND state = 'open'", (job,))]
        outcome = (f"the budget was raised to {cap} tokens (budgets.job_tokens): the job goes on" if cap is not None
                   else "the budget was removed (budgets.job_tokens): the job goes on")
        for code in codes:
            close_problem(layout, code, outcome, conn=db, log=log or EventLog(layout.events))
    return codes


def settle(layout: RepoLayout, job: str, outcome: str, *, conn: sqlite3.Connection | None = None,
           log: EventLog | None = None) -> list[str]:
    """The job ended (accepted, or failed with every task skipped): its budget problem held launches
    that no longer come, so it is closed with `outcome` instead of waiting for a retry that has
    nothing left to start."""
    with _db(layout, conn) as db:
        codes = [r["code"] for r in db.execute(
            "SELECT code FROM problems WHERE job = ? AND kind = 'budget' AND state != 'closed'", (job,))]
        for code in codes:
            close_problem(layout, code, outcome, conn=db, log=log)
    return codes
