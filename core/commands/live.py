"""CLI group 'live': the repository's event log for people, pipes and SSH.

    pilothouse live [--follow] [--job J] [--task T] [--type PREFIX] [--json] [--last N]
    pilothouse events --task T [--job J] [--json]
    pilothouse why TASK [--job J] [--json]
"""

from __future__ import annotations

import sys

from pilothouse.core.commands._out import say_skips

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


def _clock(ts: str) -> str:
    """HH:MM:SS in the viewer's local time (events are stamped in UTC)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
    except (ValueError, OverflowError):  # OverflowError: a damaged line's time at the edge of the years
        return ts[11:19] if len(ts) >= 19 else ts


def format_event(ev: dict[str, Any]) -> str:
    clock = _clock(str(ev.get("ts") or ""))
    where = "/".join(x for x in (ev.get("job"), ev.get("task")) if x) or "-"
    from pilothouse.core.queries.describe import describe
    from pilothouse.providers.untrusted import inert

    # one event, one line: a worker's newline must not forge the next event's line
    return inert(f"{clock}  {ev.get('type', '?'):<18} {where:<28} {describe(ev)}", lines=False).rstrip()


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
    say_skips(tailer)
    return events


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
        say_skips(tailer)
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
            say_skips(tailer)
            if _matches(ev, args):
                _emit(ev, args.json)
                sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def _events(args: Any) -> int:
    from pilothouse.core.state.event_index import EventLookup
    from pilothouse.providers.errors import UserError

    if not args.task and not args.job:
        raise UserError("events needs --task T (or --job J): `pilothouse live` prints everything")
    layout = _layout(args)
    # one job's or task's events through the log's index: a long log is not read whole for them
    with EventLookup(layout.events) as lookup:
        say_skips(lookup)
        if args.task:
            from pilothouse.core.queries.why import resolve_job

            args.job = resolve_job(lookup.jobs_of(args.task), args.task, args.job)
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
    if job:
        from pilothouse.core.records.state_witness import missing_log

        missing = missing_log(layout, job)
        if missing:
            raise UserError(missing)
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
    from pilothouse.core.records.jobs import validate_name

    if (layout.jobs_dir / f"{validate_name(job)}.json").is_file():
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
    from pilothouse.core.queries.why import why_report

    report = why_report(_layout(args), args.task, args.job, on_skips=say_skips)
    if args.json:
        emit_json(report)
        return 0
    from pilothouse.providers.untrusted import inert

    # the chain quotes events, reasons and hints the worker's words are in: one line each, inert
    where = report["job"] if report["task"] is None else f"{report['job']}/{report['task']}"
    print(inert(f"{where}: {report['state'] or 'unknown'}" + (f" — {report['now']}" if report["now"] else ""),
                lines=False))
    for step in report["chain"]:
        print(inert(f"  {_clock(step['ts'])}  {step['text']}", lines=False))
    for hint in report["hints"]:
        print(inert(f"  → {hint}", lines=False))
    if report.get("failure_output"):
        print("    its output ends:")
        for line in report["failure_output"]:
            print(f"    | {line}")
    return 0



