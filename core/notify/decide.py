"""What the watcher does with a judged mail: obey its command through the same core functions the
CLI and the cockpit use (`answering.act`, the supervisor's stop and start), or refuse it; every
decision about a problem is a `problem.email` event in that repository's log (source: email), so
`why` and the cockpit show that the answer came by mail.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pilothouse.core.notify import mailstate
from pilothouse.core.notify.grammar import Command
from pilothouse.core.notify.inbound import Incoming
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog
from pilothouse.core.stops import answering, problems
from pilothouse.providers.errors import UserError


def _find(repos: list[Path], code: str) -> tuple[RepoLayout, problems.Problem] | None:
    for repo in repos:
        layout = RepoLayout(repo)
        if not layout.state_db.exists():
            continue
        try:
            conn = store.connect(layout.state_db, readonly=True)
        except sqlite3.Error:
            continue
        try:
            return layout, problems.get_problem(layout, code, conn=conn)
        except (UserError, sqlite3.Error):
            continue
        finally:
            conn.close()
    return None


def _event(layout: RepoLayout, problem: problems.Problem, mail: Incoming, outcome: str, why: str) -> None:
    assert mail.command is not None
    data = {"code": problem.code, "kind": problem.kind, "reply": mail.command.reply, "who": mail.sender,
            "source": "email", "outcome": outcome, "message_id": mail.message_id, "summary": why,
            "reason": why}
    if mail.command.words:
        data["words"] = mail.command.words
    EventLog(layout.events).append("problem.email", job=problem.job, task=problem.task, data=data)


def answer(mail: Incoming, repos: list[Path]) -> tuple[bool, str]:
    """(obeyed, what to tell the operator) for a `CODE REPLY` mail."""
    cmd = mail.command
    assert cmd is not None and cmd.code and cmd.reply
    found = _find(repos, cmd.code)
    if found is None:
        return False, f"refused: no problem {cmd.code} in the repositories pilothouse serves " \
                      f"({len(repos)}); reply `status` for the open ones"
    layout, problem = found
    if problem.state != "open":
        why = f"refused: problem {problem.code} is {problem.state}" + (
            f" ({problem.answer} by {problem.who})" if problem.answer else "") + "; reply status for the open ones"
        _event(layout, problem, mail, "refused", why)
        return False, why
    try:
        answering.act(layout, problem.code, cmd.reply, cmd.words, who=f"{mail.sender} (email)")
    except UserError as exc:
        why = f"refused: {exc}"
        _event(layout, problem, mail, "refused", why)
        return False, why
    where = f"{problem.job}/{problem.task}" if problem.task else problem.job
    done = f"{cmd.describe()}: recorded for {where} ({problem.kind}) in {layout.root.name}"
    _event(layout, problem, mail, "obeyed", f"by email ({mail.proof})")
    return True, done + _running_note(layout)


def _running_note(layout: RepoLayout) -> str:
    from pilothouse.core.supervisor import control

    if control.status(layout):
        return "; the supervisor applies it now"
    return "; the supervisor is not running there: reply `resume` or run `pilothouse job start`"


def status(repos: list[Path]) -> str:
    from pilothouse.core.supervisor import control

    out: list[str] = []
    for repo in repos:
        layout = RepoLayout(repo)
        running = control.status(layout) if layout.runtime.exists() else None
        opened = problems.list_problems(layout) if layout.state_db.exists() else []
        waiting = [p for p in opened if p.state == "open" and p.pending is None]
        out.append(f"{repo}: supervisor {'running' if running else 'stopped'}, "
                   f"{len(waiting)} open problem(s)")
        for p in waiting:
            where = f"{p.job}/{p.task}" if p.task else p.job
            out.append(f"  {p.code}  {where}  {p.kind}  [{' | '.join(p.replies)}]")
    return "\n".join(out) or "no repository is registered (run `pilothouse init` in one)"


def pause(repos: list[Path], conn: sqlite3.Connection) -> str:
    from pilothouse.core.supervisor import control

    stopped = []
    for repo in repos:
        layout = RepoLayout(repo)
        if layout.runtime.exists() and control.status(layout):
            control.stop(layout)
            mailstate.mark_paused(conn, str(repo))
            EventLog(layout.events).append("supervisor.paused", data={"source": "email",
                                                                      "reason": "paused by email"})
            stopped.append(repo.name)
    if not stopped:
        return "nothing to pause: no supervisor is running"
    return f"paused (supervisor stopped; running workers finish) in: {', '.join(stopped)}; reply `resume` to go on"


def resume(conn: sqlite3.Connection) -> str:
    from pilothouse.core.supervisor import control

    started, failed = [], []
    for repo in mailstate.take_paused(conn):
        layout = RepoLayout(Path(repo))
        try:
            control.start(layout)
        except UserError as exc:
            failed.append(f"{layout.root.name}: {exc}")
            continue
        EventLog(layout.events).append("supervisor.resumed", data={"source": "email", "reason": "resumed by email"})
        started.append(layout.root.name)
    if not started and not failed:
        return "nothing to resume: no supervisor was paused by email (`pilothouse job start` starts one)"
    return "; ".join(([f"resumed in: {', '.join(started)}"] if started else []) + failed)


def obey(mail: Incoming, repos: list[Path], conn: sqlite3.Connection) -> tuple[bool, str]:
    cmd: Command | None = mail.command
    assert cmd is not None
    if cmd.verb == "answer":
        return answer(mail, repos)
    if cmd.verb == "status":
        return True, status(repos)
    if cmd.verb == "pause":
        return True, pause(repos, conn)
    return True, resume(conn)
