"""CLI group 'live': the repository's event log for people, pipes and SSH.

    pilothouse live [--follow] [--job J] [--task T] [--type PREFIX] [--json] [--last N]
    pilothouse events --task T [--job J] [--json]
    pilothouse why TASK [--job J] [--json]
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def _add_common(p: Any) -> None:
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.add_argument("--json", action="store_true", help="raw JSON lines (one event per line)")


def register(sub: Any) -> None:
    p = sub.add_parser("live", help="print the event log, tail -f style (--follow)",
                       description="Prints .ai/runtime/events.jsonl as one line per event. --follow keeps "
                                   "printing as events arrive (woken by the filesystem, not polling).")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until Ctrl-C")
    p.add_argument("--job", help="only this job's events")
    p.add_argument("--task", help="only this task's events")
    p.add_argument("--type", dest="types", action="append", metavar="PREFIX",
                   help="only events whose type starts with PREFIX (repeatable), e.g. task. or merge.")
    p.add_argument("--last", "-n", type=int, default=50, metavar="N",
                   help="how many past events to print first (default 50; 0: none; -1: all)")
    p.add_argument("--all", dest="heartbeats", action="store_true",
                   help="include supervisor heartbeats and token-usage updates (always in --json)")
    _add_common(p)
    p.set_defaults(func=_live)

    e = sub.add_parser("events", help="every event of one task (or job)")
    e.add_argument("--task", help="the task id")
    e.add_argument("--job", help="the job (needed when two jobs have a task with this id)")
    _add_common(e)
    e.set_defaults(func=_events)

    w = sub.add_parser("why", help="why a task launched, waits, stopped or failed to merge (or a job, by its "
                       "name: its planning, final gate and stops), from the events")
    w.add_argument("task", help="the task id, or a job's name")
    w.add_argument("--job", help="the task's job (needed when two jobs have a task with this id)")
    _add_common(w)
    w.set_defaults(func=_why)


# ---------------------------------------------------------------- formatting

_NOISY = ("supervisor.heartbeat", "run.usage")


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _describe(ev: dict[str, Any]) -> str:
    """The event's data as a short phrase; known types get a sentence, the rest key=value."""
    try:
        return _describe_known(ev)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        # the log is anyone's to edit: data of a known type with odd values still gets one line
        return _describe_known({"type": "", "data": ev.get("data")})


def _describe_known(ev: dict[str, Any]) -> str:
    from pilothouse.providers.usage import tokens_text

    t = ev.get("type", "")
    d = ev.get("data") or {}
    if not isinstance(d, dict):
        return _short(d)
    reason = d.get("reason")
    if t == "task.state":
        text = f"{d.get('from') or '∅'} → {d.get('to')}"
        return text + (f": {_short(reason, 120)}" if reason else "")
    if t == "run.started":
        model = f"/{d['model']}" if d.get("model") else ""
        from pilothouse.providers.registry import labelled

        return f"{d.get('role', 'run')} ({d.get('mode', '?')}) on {labelled(str(d.get('provider', '?')) + model)}" + (
            f", attempt {d['attempt']}" if d.get("attempt") else "")
    if t == "run.finished":
        text = f"{d.get('role', 'run')} {d.get('verdict', '?')}, {tokens_text(d.get('tokens'), d.get('usage'))}"
        if d.get("duration_s") is not None:
            text += f", {d['duration_s']}s"
        said = d.get("reason") or d.get("error")
        return text + (f": {_short(said, 140)}" if said else "")
    if t.startswith("problem."):
        parts = [str(d[k]) for k in ("code", "kind") if d.get(k)]
        if d.get("reply"):
            parts.append(f"reply {d['reply']}" + (f" {_short(d['words'], 60)}" if d.get("words") else "")
                         + (f" by {d['who']}" if d.get("who") else ""))
        if d.get("summary"):
            parts.append(_short(d["summary"], 100))
        if d.get("replies"):
            parts.append("[" + " | ".join(map(str, d["replies"])) + "]")
        return "  ".join(parts)
    if t == "run.activity":
        return f"{d.get('role', 'worker')}: {_short(d.get('tool') or d.get('activity') or '…', 100)}"
    if t == "gate.started":
        where = f" in {d['where']}" if d.get("where") else ""
        return f"gate {d.get('level', '?')}{where}" + (f": {_short(d['command'], 80)}" if d.get("command") else "")
    if t == "run.usage":
        tok = d.get("tokens")
        total = sum(v for v in tok.values() if isinstance(v, int | float)) if isinstance(tok, dict) else tok
        return tokens_text(total, d.get("usage")) + (" (final)" if d.get("final") else " so far")
    if t == "gate.finished":
        verdict = "passed" if d.get("passed") else "FAILED"
        where = f" in {d['where']}" if d.get("where") else ""
        took = f" ({d['duration_s']}s)" if d.get("duration_s") is not None else ""
        # its end is what tells interpreters apart (which venv, which Python): a long path loses its start
        tool = str(d.get("toolchain") or "")
        ran = f" [ran {tool if len(tool) <= 140 else '…' + tool[-139:]}]" if tool else ""
        return f"gate {d.get('level', '?')}{where} {verdict}{took}{ran}" + (
            f": {_short(reason, 120)}" if reason and not d.get("passed") else "")
    if t == "merge.finished":
        if d.get("ok"):
            sha = str(d.get("merged_sha") or "")[:10]
            return f"merged {sha}" + (" (already merged)" if d.get("already_merged") else "")
        return f"merge failed: {_short(reason or '?', 120)}"
    if t == "review.finished":
        text = f"review round {d.get('round', '?')}: {d.get('overall') or 'no verdict'}"
        if d.get("findings"):
            text += f", {d['findings']} finding(s)"
            if d.get("summaries"):
                text += f": {_short(d['summaries'][0], 80)}"
        return text
    keys = [k for k in d if k != "reason" and d[k] is not None and not isinstance(d[k], dict | list)]
    text = " ".join(f"{k}={_short(d[k], 40)}" for k in keys[:6])
    if reason:
        text = f"{_short(reason, 120)}" + (f"  ({text})" if text else "")
    return text


def _clock(ts: str) -> str:
    """HH:MM:SS in the viewer's local time (events are stamped in UTC)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return ts[11:19] if len(ts) >= 19 else ts


def format_event(ev: dict[str, Any]) -> str:
    clock = _clock(str(ev.get("ts") or ""))
    where = "/".join(x for x in (ev.get("job"), ev.get("task")) if x) or "-"
    return f"{clock}  {ev.get('type', '?'):<18} {where:<28} {_describe(ev)}".rstrip()


def _matches(ev: dict[str, Any], args: Any) -> bool:
    if getattr(args, "job", None) and ev.get("job") != args.job:
        return False
    if getattr(args, "task", None) and ev.get("task") != args.task:
        return False
    types = getattr(args, "types", None)
    if types and not any(str(ev.get("type", "")).startswith(p) for p in types):
        return False
    noisy_ok = getattr(args, "heartbeats", True) or getattr(args, "json", False)
    if not types and not noisy_ok and ev.get("type") in _NOISY:
        return False
    return True


def _emit(ev: dict[str, Any], as_json: bool) -> None:
    import json

    line = json.dumps(ev, separators=(",", ":"), default=str) if as_json else format_event(ev)
    sys.stdout.write(line + "\n")


def _layout(args: Any) -> Any:
    from pilothouse.core.records.layout import find_repo

    return find_repo(getattr(args, "repo", None))


def _all_events(layout: Any, tailer: Any = None) -> list[dict[str, Any]]:
    """Every event of the log; lines that are not events are skipped and said once on stderr."""
    from pilothouse.core.state.events import EventTailer

    tailer = tailer or EventTailer(layout.events)
    events = tailer.read_new()
    _say_skips(tailer)
    return events


def _say_skips(tailer: Any) -> None:
    notice = tailer.skip_notice()
    if notice:
        print(f"pilothouse: {notice}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- commands


def _live(args: Any) -> int:
    from pilothouse.core.state.events import EventTailer, follow

    layout = _layout(args)
    # one tailer for the history and the following: nothing between them is lost or shown twice,
    # and a log truncated or replaced meanwhile is followed from its new start (seq may restart)
    tailer = EventTailer(layout.events)
    if args.last >= 0 and not (args.job or args.task or args.types):
        # only the last lines are shown: read them from the end, not the whole log (heartbeats
        # left out may need a longer look back)
        want = looked = max(args.last, 1)
        while True:
            everything = tailer.tail(looked)
            history = [e for e in everything if _matches(e, args)]
            if len(history) >= want or len(everything) < looked:
                break
            looked *= 4
        _say_skips(tailer)
    else:
        everything = _all_events(layout, tailer)
        history = [e for e in everything if _matches(e, args)]
    shown = history if args.last < 0 else history[-args.last:] if args.last else []
    for ev in shown:
        _emit(ev, args.json)
    if not args.follow:
        if not history:
            _no_events(layout, args.job, args.task, everything, quiet=args.json)
        return 0
    sys.stdout.flush()
    try:
        for ev in follow(layout.events, tailer=tailer):
            _say_skips(tailer)
            if _matches(ev, args):
                _emit(ev, args.json)
                sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def _resolve_job(jobs: list[str], task: str, job: str | None) -> str | None:
    """The job of `task` (`jobs`: the jobs that have events of a task by that name)."""
    from pilothouse.providers.errors import UserError

    if job:
        return job
    if len(jobs) > 1:
        raise UserError(f"task {task!r} exists in jobs {', '.join(jobs)}: pass --job NAME")
    return jobs[0] if jobs else None


def _say_lookup_skips(lookup: Any) -> None:
    notice = lookup.skip_notice()
    if notice:
        print(f"pilothouse: {notice}", file=sys.stderr, flush=True)


def _events(args: Any) -> int:
    from pilothouse.core.state.event_index import EventLookup
    from pilothouse.providers.errors import UserError

    if not args.task and not args.job:
        raise UserError("events needs --task T (or --job J): `pilothouse live` prints everything")
    layout = _layout(args)
    # one job's or task's events through the log's index: a long log is not read whole for them
    with EventLookup(layout.events) as lookup:
        _say_lookup_skips(lookup)
        if args.task:
            args.job = _resolve_job(lookup.jobs_of(args.task), args.task, args.job)
        picked = lookup.select(args.job, args.task) if args.job else []
        if not picked:
            _no_events(layout, args.job, args.task, lookup, quiet=args.json)
    for ev in picked:
        _emit(ev, args.json)
    return 0


def _no_events(layout: Any, job: str | None, task: str | None, events: Any, quiet: bool = False) -> None:
    """Nothing matched: a job or task nobody knows is a mistake (UserError, like `why`); a known
    one that has no events yet is only said on stderr (unless `quiet`). `events`: the events read,
    or an EventLookup of the log."""
    from pilothouse.providers.errors import UserError

    if job and not _job_known(layout, job, events):
        raise UserError(f"no job named {job!r} (no record, no events): `pilothouse job list` shows the jobs")
    if task and not _task_known(layout, job, task, events):
        where = f" in job {job}" if job else ""
        raise UserError(f"no events for task {task!r}{where} and no such task defined: "
                        "`pilothouse job status` lists the tasks")
    if quiet:
        return
    if job or task:
        what = " ".join(x for x in (f"task {task}" if task else "", f"job {job}" if job else "") if x)
        print(f"no events for {what} yet", file=sys.stderr)
    elif events:
        print("no events of these types yet", file=sys.stderr)
    else:
        print("no events yet" + ("" if layout.events.exists() else f" ({layout.events} does not exist)"),
              file=sys.stderr)


def _job_known(layout: Any, job: str, events: Any) -> bool:
    if (layout.jobs_dir / f"{job}.json").is_file():
        return True
    if isinstance(events, list):
        return any(e.get("job") == job for e in events)
    return bool(events.has_job(job))


def _task_known(layout: Any, job: str | None, task: str, events: Any) -> bool:
    from pilothouse.core.records.taskgraph import load_tasks
    from pilothouse.providers.errors import UserError

    if isinstance(events, list):
        if any(e.get("task") == task and (job is None or e.get("job") == job) for e in events):
            return True
    elif (jobs := events.jobs_of(task)) and (job is None or job in jobs):
        return True
    try:
        return any(t.id == task for t in load_tasks(layout, job))
    except UserError:
        return False


def _why(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json

    report = why_report(_layout(args), args.task, args.job, on_skips=_say_lookup_skips)
    if args.json:
        emit_json(report)
        return 0
    where = report["job"] if report["task"] is None else f"{report['job']}/{report['task']}"
    print(f"{where}: {report['state'] or 'unknown'}" + (f" — {report['now']}" if report["now"] else ""))
    for step in report["chain"]:
        print(f"  {_clock(step['ts'])}  {step['text']}")
    for hint in report["hints"]:
        print(f"  → {hint}")
    if report.get("failure_output"):
        print("    its output ends:")
        for line in report["failure_output"]:
            print(f"    | {line}")
    return 0


# ---------------------------------------------------------------- why

def why_report(layout: Any, name: str, job: str | None = None, *, on_skips: Any = None,
               listing: str = "`pilothouse job status` lists the jobs and tasks") -> dict[str, Any]:
    """`why NAME`: the task's decision chain (its job found from the events unless given), or the
    job's own when NAME is a job. Reads only that job's events, through the log's index."""
    from pilothouse.core.state.event_index import EventLookup
    from pilothouse.providers.errors import UserError

    with EventLookup(layout.events) as lookup:
        if on_skips is not None:
            on_skips(lookup)
        owner = _resolve_job(lookup.jobs_of(name), name, job)
        if owner is None and job is None and lookup.has_job(name):
            return explain_job(layout, name, lookup.select(name, None))
        if owner is None:
            raise UserError(f"no events for task or job {name!r}: {listing}")
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
              "text": f"{ev.get('type')!s:<16} {_describe(ev)}", "data": ev.get("data")}
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
            hints.append(f"problem {p['code']} ({p['task'] or 'the job'}: {p['kind']}): {_short(p['summary'], 100)}"
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
                          "text": f"{t:<16} {_describe(ev)}", "data": ev.get("data")})
        elif started and ev.get("task") is None and t in _JOB_TYPES:
            chain.append({"seq": ev.get("seq"), "ts": str(ev.get("ts") or ""), "type": t,
                          "text": f"{t:<16} (job) {_describe(ev)}", "data": ev.get("data")})
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
        hints.append(f"problem {p['code']} ({p['kind']}): {_short(p['summary'], 100)} — "
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
        hints.append(f"last failure: {last['type']} — {_short(last['data'].get('reason') or _describe(last), 140)}")
        failure_output = _last_lines(last["data"].get("output_tail"))
    return {"job": job, "task": task, "state": state, "now": now, "chain": chain, "hints": hints,
            "failure_output": failure_output}


def _last_lines(text: Any, count: int = 6, width: int = 160) -> list[str]:
    """The last lines of a gate's output (a test summary, the error), for the operator's terminal.

    The output is what the worker's code printed: anything that is not printable (a terminal
    escape sequence among them) is dropped, so it cannot move the cursor or recolour the screen."""
    from pilothouse.core.cli import printable

    if not isinstance(text, str):
        return []
    # also when stdout is a pipe (`| less -R` would still obey an escape sequence)
    lines = printable(text.replace("\r", "\n")).splitlines()
    return [_short(line, width) for line in lines if line.strip()][-count:]
