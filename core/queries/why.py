"""`why`: the decision chain of one task or job, from its events and state.db, and what it waits for now.

Reads only that job's events, through the log's index (core/state/event_index.py)."""

from __future__ import annotations

from typing import Any

from pilothouse.core.queries.describe import describe, short


def resolve_job(jobs: list[str], task: str, job: str | None) -> str | None:
    """The job of `task` (`jobs`: the jobs that have events of a task by that name)."""
    from pilothouse.providers.errors import UserError

    if job:
        return job
    if len(jobs) > 1:
        raise UserError(f"task {task!r} exists in jobs {', '.join(jobs)}: pass --job NAME")
    return jobs[0] if jobs else None


def why_report(layout: Any, name: str, job: str | None = None, *, on_skips: Any = None,
               listing: str = "`pilothouse job status` lists the jobs and tasks") -> dict[str, Any]:
    """`why NAME`: the task's decision chain (its job found from the events unless given), or the
    job's own when NAME is a job. Reads only that job's events, through the log's index."""
    from pilothouse.core.state.event_index import EventLookup
    from pilothouse.providers.errors import UserError

    with EventLookup(layout.events) as lookup:
        if on_skips is not None:
            on_skips(lookup)
        owner = resolve_job(lookup.jobs_of(name), name, job)
        if owner is None and job is None and lookup.has_job(name):
            return explain_job(layout, name, lookup.select(name, None))
        if owner is None:
            from pilothouse.core.records.state_witness import missing_log

            raise UserError((job is None and missing_log(layout, name))
                            or f"no events for task or job {name!r}: {listing}")
        return explain(layout, owner, name, lookup.select(owner, name, job_level=True))


_CHAIN_TYPES = ("task.", "run.started", "run.finished", "gate.finished", "review.", "merge.", "problem.")
_JOB_TYPES = ("job.revised", "job.blocked", "job.failed", "job.planned", "budget.exceeded", "quota.changed")


def _db_rows(layout: Any, job: str, task: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]],
                                                          list[dict[str, Any]]]:
    """(the task's row, its job's task rows, its open problems) from state.db, read-only."""
    import sqlite3

    from pilothouse.core.state.store import connect

    if not layout.state_db.exists():
        return None, [], []
    try:
        conn = connect(layout.state_db, readonly=True)
    except sqlite3.Error:
        return None, [], []
    try:
        rows = [dict(r) for r in conn.execute("SELECT * FROM tasks WHERE job=?", (job,))]
        problems = [dict(r) for r in conn.execute(
            "SELECT * FROM problems WHERE job=? AND task=? AND state!='closed'", (job, task))]
    except sqlite3.Error:
        return None, [], []
    finally:
        conn.close()
    mine = next((r for r in rows if r["task"] == task), None)
    return mine, rows, problems


_JOB_CHAIN = ("job.", "gate.", "problem.", "review.", "run.started", "run.finished", "budget.", "merge.")


def explain_job(layout: Any, job: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What happened to the job itself (planning, its final gate and review, its stops) and what it
    waits for now; each task has its own `why TASK`."""
    import json
    import sqlite3

    from pilothouse.core.state.store import connect

    chain = [{"seq": ev.get("seq"), "ts": str(ev.get("ts") or ""), "type": str(ev.get("type")),
              "text": f"{ev.get('type')!s:<16} {describe(ev)}", "data": ev.get("data")}
             for ev in events if ev.get("job") == job and ev.get("task") is None
             and str(ev.get("type", "")).startswith(_JOB_CHAIN)]
    state = now = None
    hints: list[str] = []
    if layout.state_db.exists():
        try:
            conn = connect(layout.state_db, readonly=True)
            try:
                row = conn.execute("SELECT state, reason FROM jobs_state WHERE job=?", (job,)).fetchone()
                tasks = conn.execute("SELECT task, state FROM tasks WHERE job=? ORDER BY rowid", (job,)).fetchall()
                problems = conn.execute("SELECT code, task, kind, summary, replies FROM problems WHERE job=? "
                                        "AND state!='closed' ORDER BY opened_at", (job,)).fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            row, tasks, problems = None, [], []
        if row is not None:
            state, now = row["state"], row["reason"]
        if tasks:
            counts: dict[str, list[str]] = {}
            for t in tasks:
                counts.setdefault(t["state"], []).append(t["task"])
            hints.append("tasks: " + ", ".join(f"{len(v)} {k}" + (f" ({', '.join(v[:3])})" if k != "done" else "")
                                               for k, v in counts.items()))
        for p in problems:
            first = (json.loads(p["replies"] or "[]") or ["REPLY"])[0]
            hints.append(f"problem {p['code']} ({p['task'] or 'the job'}: {p['kind']}): {short(p['summary'], 100)}"
                         f" — pilothouse problem act {p['code']} {first}")
    return {"job": job, "task": None, "state": state, "now": now, "chain": chain, "hints": hints}


def explain(layout: Any, job: str, task: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The decision chain of one task: what happened to it and why, then what it waits for now."""
    import json

    chain: list[dict[str, Any]] = []
    state = now = None
    started = False
    for ev in events:
        t = str(ev.get("type", ""))
        if ev.get("job") != job:
            continue
        if ev.get("task") == task and t.startswith(_CHAIN_TYPES):
            started = True
            if t == "task.state":
                d = ev.get("data") or {}
                state, now = d.get("to"), d.get("reason")
            chain.append({"seq": ev.get("seq"), "ts": str(ev.get("ts") or ""), "type": t,
                          "text": f"{t:<16} {describe(ev)}", "data": ev.get("data")})
        elif started and ev.get("task") is None and t in _JOB_TYPES:
            chain.append({"seq": ev.get("seq"), "ts": str(ev.get("ts") or ""), "type": t,
                          "text": f"{t:<16} (job) {describe(ev)}", "data": ev.get("data")})
    row, rows, problems = _db_rows(layout, job, task)
    hints: list[str] = []
    if row is not None:
        state = row["state"]
        now = row.get("reason") or now
        if state in ("planned", "ready"):
            try:
                deps = json.loads(row.get("depends_on") or "[]")
            except ValueError:
                deps = []
            states = {r["task"]: r["state"] for r in rows}
            pending = [f"{d} ({states.get(d, 'unknown')})" for d in deps if states.get(d) != "done"]
            if pending:
                hints.append("waits for: " + ", ".join(pending))
            elif state == "ready":
                hints.append("ready: launches when a worker slot is free and no running task writes its paths")
    for p in problems:
        try:
            replies = " | ".join(json.loads(p.get("replies") or "[]"))
        except ValueError:
            replies = ""
        hints.append(f"problem {p['code']} ({p['kind']}): {short(p['summary'], 100)} — "
                     f"pilothouse problem act {p['code']} {replies.split(' | ')[0] if replies else 'REPLY'}"
                     + (f"  [{replies}]" if replies else ""))
    failures = [c for c in chain if c["type"] in ("merge.rolled_back", "gate.finished", "review.finished")
                and isinstance(c["data"], dict) and (c["data"].get("passed") is False
                                                      or c["type"] == "merge.rolled_back"
                                                      or c["data"].get("overall") in ("CHANGES", "REJECT"))]
    failure_output: list[str] = []
    if state == "done":
        merged = [c for c in chain if c["type"] == "merge.finished" and isinstance(c["data"], dict)
                  and c["data"].get("ok")]
        if merged:
            hints.append(f"merged as {str(merged[-1]['data'].get('merged_sha') or '')[:10]}")
    elif failures:
        last = failures[-1]
        hints.append(f"last failure: {last['type']} — {short(last['data'].get('reason') or describe(last), 140)}")
        failure_output = _last_lines(last["data"].get("output_tail"))
    return {"job": job, "task": task, "state": state, "now": now, "chain": chain, "hints": hints,
            "failure_output": failure_output}


def _last_lines(text: Any, count: int = 6, width: int = 160) -> list[str]:
    """The last lines of a gate's output (a test summary, the error), for the operator's terminal.

    The output is what the worker's code printed: anything that is not printable (a terminal
    escape sequence among them) is dropped, so it cannot move the cursor or recolour the screen."""
    from pilothouse.providers.untrusted import inert

    if not isinstance(text, str):
        return []
    # also when stdout is a pipe (`| less -R` would still obey an escape sequence)
    lines = inert(text.replace("\r", "\n")).splitlines()
    return [short(line, width) for line in lines if line.strip()][-count:]
