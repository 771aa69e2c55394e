"""Job-level holds: reasons nothing new may launch for a job although its tasks are ready.

- its recorded tokens passed `budgets.job_tokens` (a `budget` problem says so);
- the same setup failure stopped two of its tasks (until the operator retries one of them):
  "the same" is the same command failing with the same output tail once paths, durations,
  hashes and counts are masked (`setup_fingerprint`).

The supervisor asks `launch_hold` before launching anything for a job; a hold never stops
runs already going, and the work so far is kept.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from datetime import datetime

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.stops import budgets
from pilothouse.core.stops.problems import _db, get_problem


def launch_hold(layout: RepoLayout, job: str, cap: int | None, *, now: datetime | None = None,
                conn: sqlite3.Connection | None = None, log: EventLog | None = None,
                setup: bool = True) -> str | None:
    """None when the job may launch, else why not (one line, for the event and `why`).
    `setup=False`: for a launch that needs no worktree setup (the assigner), only the budget holds."""
    held = job_hold(layout, job, conn=conn) if setup else []
    if held:
        return (f"held: the same setup failure stopped {len(held)} tasks ({', '.join(held)}); "
                f"fix the cause, then retry one of them (pilothouse problem act {held[0]} retry)")
    if cap is not None:
        problem = budgets.enforce(layout, job, cap, now=now, conn=conn, log=log)
        if problem is not None:
            return (f"held: job {job} used {problem.evidence.get('used_tokens')} tokens, past its budget of "
                    f"{problem.evidence.get('cap')}; raise budgets.job_tokens, then "
                    f"pilothouse problem act {problem.code} retry")
    return None


_VOLATILE = [
    (re.compile(r"\b\d+(\.\d+)?\s*(s|ms|sec|seconds)\b"), "<dur>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{7,40}\b"), "<sha>"),
    (re.compile(r"(/[\w.@+-]+)+"), "<path>"),
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z?"), "<ts>"),
    (re.compile(r"\b\d+\b"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
]


def setup_fingerprint(command: str, output_tail: str) -> str:
    """The same setup failure in two worktrees gives the same fingerprint.

    Worktree paths, durations, addresses, hashes and counts differ between tasks failing the
    same way, so they are masked before hashing; only the last lines (the error) count.
    """
    lines = [ln for ln in output_tail.strip().splitlines() if ln.strip()][-8:]
    text = "\n".join(lines)
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return hashlib.sha256(f"{command.strip()}\n{text.strip()}".encode()).hexdigest()[:16]


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


def same_setup_failure(layout: RepoLayout, code: str, *, conn: sqlite3.Connection | None = None) -> list[str]:
    """Other open setup_failed problems of the job failing exactly like `code` (same fingerprint).

    When the operator retries one of them, the supervisor retries these with it: they were held
    for the same cause, which the operator just fixed.
    """
    with _db(layout, conn) as db:
        p = get_problem(layout, code, conn=db)
        fp = p.evidence.get("fingerprint")
        if p.kind != "setup_failed" or not fp:
            return []
        rows = db.execute("SELECT code, evidence FROM problems WHERE job = ? AND kind = 'setup_failed'"
                          " AND state = 'open' AND code != ?", (p.job, p.code)).fetchall()
    return [r["code"] for r in rows if json.loads(r["evidence"] or "{}").get("fingerprint") == fp]
