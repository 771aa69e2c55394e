"""The operator's answer to a problem (`act`): checked against what the problem takes, then written
as one `replies` row and a problem.answered event, compare-and-set, so that of two answers given at
once exactly one is recorded. The supervisor applies it later (core/stops/problems.py:
consume_replies); the CLI, the cockpit, MCP and email replies all answer through here."""

from __future__ import annotations

import getpass
import sqlite3
from datetime import datetime
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog, utc_now_iso
from pilothouse.core.stops.problems import Problem, _db, _tx, get_problem, skip_preview
from pilothouse.core.stops.replies import NEEDS_WORDS, REPLIES
from pilothouse.providers import guard
from pilothouse.providers.errors import UserError


def default_who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = "operator"
    return f"{user}@cli"


def act(layout: RepoLayout, code: str, reply: str, words: str | None = None, who: str | None = None,
        *, now: datetime | None = None, conn: sqlite3.Connection | None = None,
        log: EventLog | None = None) -> dict[str, Any]:
    """The operator's answer to a problem: validated, written to `replies`, evented.

    Raises UserError (one line, with the replies that do fit) when the reply doesn't fit.
    """
    reply = reply.strip().lower()
    words = (words or "").strip() or None
    who = who or default_who()
    at = utc_now_iso(now)
    if conn is None:
        get_problem(layout, code)  # no store: no such problem, and none is created to say so
    with _db(layout, conn) as db:
        problem = get_problem(layout, code, conn=db)
        fits = ", ".join(problem.replies)
        _still_open(problem)
        if reply not in REPLIES:
            raise UserError(f"'{reply}' is not a reply; problem {problem.code} ({problem.kind}) takes: {fits}")
        if reply not in problem.replies:
            raise UserError(f"'{reply}' does not fit problem {problem.code} ({problem.kind}); "
                            f"it takes: {fits}")
        if reply in NEEDS_WORDS and not words:
            raise UserError(f"'{reply}' needs your words: pilothouse problem act {problem.code} {reply} WORDS…")
        if reply not in NEEDS_WORDS and words:
            raise UserError(f"'{reply}' takes no words (only hint and plan do); "
                            f"run: pilothouse problem act {problem.code} {reply}")
        guard.check_words(words, f"your {reply} words")
        if problem.kind == "budget" and reply == "retry":
            _check_budget_raised(layout, problem)
        cancels = skip_preview(layout, problem.code, conn=db) if reply == "skip" else []
        data: dict[str, Any] = {"code": problem.code, "kind": problem.kind, "reply": reply, "who": who,
                                "at": at}
        if words:
            data["words"] = words
        if cancels:
            data["cancels"] = cancels

        def commit() -> None:
            # compare-and-set: the problem must still be open with no answer waiting, read again
            # inside the write transaction, so of two operators answering at once exactly one wins
            with _tx(db):
                _still_open(get_problem(layout, problem.code, conn=db))
                db.execute("INSERT INTO replies(code, reply, words, who, at) VALUES (?, ?, ?, ?, ?)",
                           (problem.code, reply, words, who, at))

        # committed under the event log's lock: what the supervisor does with the reply is logged
        # after the answer, never before it
        (log or EventLog(layout.events)).append("problem.answered", job=problem.job, task=problem.task,
                                                 data=data, commit=commit)
    return data


class AlreadyAnswered(UserError):
    """Another answer to this problem won: the one line names it, who gave it and when."""


def _still_open(problem: Problem) -> None:
    if problem.pending is not None:
        p = problem.pending
        raise AlreadyAnswered(f"problem {problem.code} was already answered: {_answer_text(p)}, waiting for the "
                              "supervisor; yours was not recorded")
    if problem.state != "open":
        won = {"reply": problem.answer, "words": problem.words, "who": problem.who, "at": problem.answered_at}
        text = _answer_text(won) if problem.answer else f"it is {problem.state}"
        raise AlreadyAnswered(f"problem {problem.code} was already answered: {text}; yours was not recorded "
                              "(see `pilothouse problem list` for open ones)")


def _answer_text(answer: dict[str, Any]) -> str:
    words = answer.get("words")
    said = f" {words!r}" if words else ""
    if len(said) > 60:
        said = said[:57] + "…'"
    return f"{answer.get('reply')}{said} by {answer.get('who') or 'someone'} at {answer.get('at') or '?'}"


def _check_budget_raised(layout: RepoLayout, problem: Problem) -> None:
    from pilothouse.core.records.project import job_token_cap

    used = int(problem.evidence.get("used_tokens", 0))
    cap = job_token_cap(layout)
    if cap is not None and used >= cap:
        raise UserError(f"job {problem.job} has used {used} tokens and budgets.job_tokens is still {cap}: "
                        f"raise it in {layout.project_yaml} (or remove it), then retry")
