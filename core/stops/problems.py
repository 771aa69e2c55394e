"""Problems: what automatic retries could not fix, waiting for the operator's one-word reply.

The supervisor opens a problem (`open_problem`) when a task stops; the operator answers it
(`act`) from the CLI or the cockpit, which writes only a `replies` row and a problem.answered
event; the supervisor then `consume_replies` and applies each answer, closing the problem with
`close_problem`. A consumed-but-unclosed answer survives a supervisor crash: consume_replies
hands it back again until it is closed, so applying an answer must be idempotent.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog, utc_now_iso
from pilothouse.core.stops.fingerprint import setup_fingerprint
from pilothouse.core.stops.replies import JOB_REPLIES, KIND_REPLIES, REPLIES
from pilothouse.providers.errors import UserError

# Letters only, with the look-alikes gone: no I/L (1), O/Q (0), B (8), S (5), Z (2), G (6).
ALPHABET = "ACDEFHJKMNPRTUVWXY"
CODE_LEN = 6

@dataclass
class Problem:
    code: str
    job: str
    task: str | None
    kind: str
    summary: str
    evidence: dict[str, Any]
    replies: list[str]
    state: str                      # open|answered|closed
    opened_at: str
    answer: str | None = None
    answered_at: str | None = None
    closed_at: str | None = None
    pending: dict[str, Any] | None = None   # an operator's reply the supervisor has not taken yet
    words: str | None = None
    who: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    """An operator's answer, as the supervisor receives it."""

    code: str
    reply: str
    words: str | None
    who: str
    at: str
    problem: Problem
    cancels: list[str] = field(default_factory=list)   # for skip: the task and its dependents


@contextmanager
def _db(layout: RepoLayout, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
    if conn is not None:
        yield conn
        return
    own = store.connect(layout.state_db)
    try:
        yield own
    finally:
        own.close()


@contextmanager
def _tx(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (the store connects in autocommit mode); nests as a no-op."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def new_code(conn: sqlite3.Connection) -> str:
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))
        if conn.execute("SELECT 1 FROM problems WHERE code = ?", (code,)).fetchone() is None:
            return code


def normalise_code(code: str) -> str:
    return code.strip().upper()


def row_to_problem(row: sqlite3.Row) -> Problem:
    """A problems row as a Problem (core and the cockpit's read-only queries alike); a column that
    does not read as what it should be reads as empty."""
    ans, evidence, replies = (store.loads(row[c], d) for c, d in (("answer", {}), ("evidence", {}), ("replies", [])))
    ans = ans if isinstance(ans, dict) else {}
    return Problem(code=row["code"], job=row["job"], task=row["task"], kind=row["kind"], summary=row["summary"],
                   evidence=evidence if isinstance(evidence, dict) else {},
                   replies=[str(r) for r in replies] if isinstance(replies, list) else [], state=row["state"],
                   opened_at=row["opened_at"], answer=ans.get("reply"), answered_at=row["answered_at"],
                   closed_at=row["closed_at"], words=ans.get("words"), who=ans.get("who"))


def _target(where: Any) -> tuple[RepoLayout, sqlite3.Connection | None, EventLog | None]:
    """A RepoLayout, or the supervisor's StateStore (its connection and event log)."""
    if isinstance(where, RepoLayout):
        return where, None, None
    log = where.events
    # events.jsonl lives in <root>/.ai/runtime/
    return RepoLayout(Path(log.path).parent.parent.parent), where.conn, log


def open_problem(layout: Any, job: str, task: str | None, kind: str, summary: str,
                 evidence: dict[str, Any] | None = None, replies: list[str] | tuple[str, ...] | None = None,
                 *, now: datetime | None = None, conn: sqlite3.Connection | None = None,
                 log: EventLog | None = None) -> Problem:
    """Record a stop as a problem (supervisor side) and event it; returns the problem.

    `layout` is the RepoLayout or the supervisor's StateStore. The kind's replies come from
    KIND_REPLIES (the one table of what fixes what); `replies` is used for other kinds.
    One open problem per task and kind: opening it again returns the existing one. A
    setup_failed problem with the same fingerprint as another open one in the job holds the
    job (see `job_hold`); the opened event says so.
    """
    layout, own_conn, own_log = _target(layout)
    conn, log = conn or own_conn, log or own_log
    if kind in KIND_REPLIES:
        allowed = list(KIND_REPLIES[kind])
    else:
        allowed = list(replies) if replies else ["retry", "skip"]
    if task is None:
        allowed = [r for r in allowed if r in JOB_REPLIES]
    unknown = [r for r in allowed if r not in REPLIES]
    if unknown:
        raise ValueError(f"unknown replies {unknown} for problem kind {kind}")
    ev = dict(evidence or {})
    if kind == "setup_failed" and "fingerprint" not in ev:
        ev["fingerprint"] = setup_fingerprint(str(ev.get("command", "")), str(ev.get("output_tail", "")))
    log = log or EventLog(layout.events)
    at = utc_now_iso(now)
    with _db(layout, conn) as db:
        with _tx(db):
            existing = db.execute(
                "SELECT * FROM problems WHERE job = ? AND task IS ? AND kind = ? AND state != 'closed'",
                (job, task, kind)).fetchone()
            if existing is not None:
                return row_to_problem(existing)
            code = new_code(db)
            db.execute(
                "INSERT INTO problems(code, job, task, kind, summary, evidence, replies, state, opened_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?)",
                (code, job, task, kind, summary, json.dumps(ev, default=str), json.dumps(allowed), at))
        hold = job_hold(layout, job, conn=db)
        problem = get_problem(layout, code, conn=db)
    data: dict[str, Any] = {"code": code, "kind": kind, "summary": summary, "replies": allowed,
                            "evidence": ev, "reason": summary}
    if hold:
        data["holds_job"] = hold
    log.append("problem.opened", job=job, task=task, data=data)
    return problem


def get_problem(layout: RepoLayout, code: str, *, conn: sqlite3.Connection | None = None) -> Problem:
    code = normalise_code(code)
    if conn is None:
        # read-only: a look (or an answer) at a code creates no store; a lost one is said as such
        reader = store.open_reader(layout.state_db)
        if reader is None:
            raise UserError(f"no problem with code {code} in {layout.root}: no job has run here yet "
                            "(see `pilothouse job status`)")
        try:
            return get_problem(layout, code, conn=reader)
        finally:
            reader.close()
    with _db(layout, conn) as db:
        row = db.execute("SELECT * FROM problems WHERE code = ?", (code,)).fetchone()
        if row is None:
            open_codes = [r["code"] for r in db.execute(
                "SELECT code FROM problems WHERE state = 'open' ORDER BY opened_at")]
            hint = f"open problems: {', '.join(open_codes)}" if open_codes else "there are no open problems"
            raise UserError(f"no problem with code {code} in {layout.root}: {hint} (see `pilothouse problem list`)")
        problem = row_to_problem(row)
        pend = db.execute("SELECT * FROM replies WHERE code = ? AND consumed_at IS NULL ORDER BY id",
                          (code,)).fetchone()
        if pend is not None:
            problem.pending = {"reply": pend["reply"], "words": pend["words"], "who": pend["who"],
                               "at": pend["at"]}
        return problem


def list_problems(layout: RepoLayout, open_only: bool = True, *, job: str | None = None,
                  conn: sqlite3.Connection | None = None) -> list[Problem]:
    """Problems, oldest first. open_only keeps those still waiting for the supervisor to finish
    with them (open, or answered and not yet closed); an answer the supervisor has not taken yet
    is in `pending`."""
    if conn is None:
        # read-only: listing creates no store, and tells a lost or damaged one from an empty one
        reader = store.open_reader(layout.state_db)
        if reader is None:
            return []
        try:
            found = list_problems(layout, open_only, job=job, conn=reader)
            if not found:
                _require_not_lost(layout, reader, job)
            return found
        except sqlite3.Error as exc:
            raise store.unusable(layout.state_db, exc) from None
        finally:
            reader.close()
    sql = "SELECT * FROM problems"
    where, args = [], []
    if open_only:
        where.append("state != 'closed'")
    if job is not None:
        where.append("job = ?")
        args.append(job)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY opened_at, code"
    with _db(layout, conn) as db:
        problems = [row_to_problem(r) for r in db.execute(sql, args)]
        pending = {r["code"]: r for r in db.execute(
            "SELECT * FROM replies WHERE consumed_at IS NULL ORDER BY id DESC")}
    for p in problems:
        r = pending.get(p.code)
        if r is not None:
            p.pending = {"reply": r["reply"], "words": r["words"], "who": r["who"], "at": r["at"]}
    return problems


def _require_not_lost(layout: RepoLayout, conn: sqlite3.Connection, job: str | None) -> None:
    """"No open problems" only if the event log agrees: a problem it shows open and the store has
    no row of is lost state (read only when the answer would be none)."""
    from pilothouse.core.records import state_witness

    _, opened = state_witness.expected(layout)
    codes = {r[0] for r in conn.execute("SELECT code FROM problems")}
    lost = [f"open problem {c} ({p['job']})" for c, p in sorted(opened.items())
            if c not in codes and (job is None or p["job"] == job)]
    if lost:
        raise store.StateDamaged(state_witness.lost_line(layout, lost))


def _dependents(conn: sqlite3.Connection, job: str, task: str) -> list[str]:
    """The task's transitive dependents in its job, from the supervisor's task table."""
    rows = conn.execute("SELECT task, depends_on, state FROM tasks WHERE job = ?", (job,)).fetchall()
    children: dict[str, list[str]] = {}
    for r in rows:
        for dep in json.loads(r["depends_on"] or "[]"):
            children.setdefault(dep, []).append(r["task"])
    finished = {r["task"] for r in rows if r["state"] in ("done", "skipped", "cancelled")}
    seen: list[str] = []
    todo = sorted(children.get(task, []))
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.append(t)
        todo.extend(sorted(children.get(t, [])))
    return [t for t in seen if t not in finished]


def skip_preview(layout: RepoLayout, code: str, *, conn: sqlite3.Connection | None = None) -> list[str]:
    """Task ids a `skip` of this problem would cancel: its task, then every task depending on it."""
    with _db(layout, conn) as db:
        problem = get_problem(layout, code, conn=db)
        if problem.task is None:
            return []
        return [problem.task, *_dependents(db, problem.job, problem.task)]


def consume_replies(layout: RepoLayout, *, now: datetime | None = None,
                    conn: sqlite3.Connection | None = None) -> list[Reply]:
    """Supervisor side: take every waiting reply, and return every answered-but-unclosed problem.

    The first reply to an open problem wins; later ones for the same problem are consumed and
    dropped. Call `close_problem` once an answer is applied.
    """
    at = utc_now_iso(now)
    with _db(layout, conn) as db:
        with _tx(db):
            for r in db.execute("SELECT * FROM replies WHERE consumed_at IS NULL ORDER BY id").fetchall():
                db.execute("UPDATE replies SET consumed_at = ? WHERE id = ?", (at, r["id"]))
                db.execute("UPDATE problems SET state = 'answered', answer = ?, answered_at = ?"
                           " WHERE code = ? AND state = 'open'",
                           (json.dumps({"reply": r["reply"], "words": r["words"], "who": r["who"],
                                        "at": r["at"]}), r["at"], r["code"]))
        out = []
        for row in db.execute("SELECT * FROM problems WHERE state = 'answered' ORDER BY answered_at, code"):
            p = row_to_problem(row)
            rep = Reply(code=p.code, reply=p.answer or "", words=p.words, who=p.who or "",
                        at=p.answered_at or "", problem=p)
            if rep.reply == "skip" and p.task:
                rep.cancels = [p.task, *_dependents(db, p.job, p.task)]
            out.append(rep)
        return out


def close_problem(layout: RepoLayout, code: str, outcome: str, *, now: datetime | None = None,
                  conn: sqlite3.Connection | None = None, log: EventLog | None = None) -> None:
    """Supervisor side: the answer was applied (or the problem went away by itself)."""
    at = utc_now_iso(now)
    with _db(layout, conn) as db:
        with _tx(db):
            row = db.execute("SELECT * FROM problems WHERE code = ?", (code,)).fetchone()
            if row is None or row["state"] == "closed":
                return
            db.execute("UPDATE problems SET state = 'closed', closed_at = ? WHERE code = ?", (at, code))
    (log or EventLog(layout.events)).append(
        "problem.closed", job=row["job"], task=row["task"],
        data={"code": code, "kind": row["kind"], "outcome": outcome, "reason": outcome})


def open_problem_for(layout: RepoLayout, job: str, task: str, *,
                     conn: sqlite3.Connection | None = None) -> Problem | None:
    """The task's problem still waiting for an answer, if any (for `task retry TASK`)."""
    with _db(layout, conn) as db:
        row = db.execute("SELECT code FROM problems WHERE job = ? AND task = ? AND state = 'open'"
                         " ORDER BY opened_at DESC", (job, task)).fetchone()
        return get_problem(layout, row["code"], conn=db) if row else None


def job_hold(layout: RepoLayout, job: str, *, conn: sqlite3.Connection | None = None) -> list[str]:
    """Codes of the open setup problems that hold this job, or [] when nothing holds it.

    Two or more open setup_failed problems with one fingerprint hold the job: no new launches
    until the operator retries one of them, so no tokens go to sessions that would fail alike.
    A retry answer on any problem of that fingerprint (waiting or taken) releases the hold.
    """
    with _db(layout, conn) as db:
        rows = db.execute("SELECT code, evidence, state, opened_at FROM problems"
                          " WHERE job = ? AND kind = 'setup_failed'", (job,)).fetchall()
        retried = {r["code"]: r["at"] for r in db.execute(
            "SELECT code, max(at) AS at FROM replies WHERE reply = 'retry' AND code IN"
            " (SELECT code FROM problems WHERE job = ? AND kind = 'setup_failed') GROUP BY code", (job,))}
    groups: dict[str, list[str]] = {}
    newest: dict[str, str] = {}
    last_retry: dict[str, str] = {}
    for r in rows:
        fp = json.loads(r["evidence"] or "{}").get("fingerprint")
        if not fp:
            continue
        if r["code"] in retried:
            last_retry[fp] = max(last_retry.get(fp, ""), retried[r["code"]])
        if r["state"] == "open" and r["code"] not in retried:
            groups.setdefault(fp, []).append(r["code"])
            newest[fp] = max(newest.get(fp, ""), r["opened_at"])
    # a retry after the group's newest failure releases it; failing alike again re-forms it
    held = [codes for fp, codes in groups.items()
            if len(codes) >= 2 and last_retry.get(fp, "") < newest[fp]]
    return sorted(c for codes in held for c in codes)
