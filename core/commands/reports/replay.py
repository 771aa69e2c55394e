"""CLI: `pilothouse replay JOB [--at TIME] [--json] [--last N] [--speed N]` — the job as it stood at a
moment, from its event log alone (core/queries/replay.py), so a `.ai/` copied from another machine
replays the same.

`--json` and plain text print the state at TIME: the job's state, each task's, the problems open, the
runs going, the last events, the tokens and cost of the runs finished by then. With a terminal on
stdout and no `--json`, the cockpit's replay screen opens instead (`_interactive`), at TIME, playing
at `--speed` (seconds of the job a second).
"""

from __future__ import annotations

import argparse
import sys

from pilothouse.core.commands._out import add_json_flag, emit_json

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any, Literal

    from pilothouse.core.queries.replay import Replay

_WHEN = ("an ISO time (2026-12-02T20:37:35Z; no zone means UTC); an offset from the job's first event "
         "(+90s, +5m, +1h30m; a last number with no unit is of the next unit down: +90 is +90s, +1m30 "
         "is +1m30s, +1h30 is +1h30m); one back from its last event (-30s, -2m); 'start' or 'end'")


def _checked(args: argparse.Namespace) -> None:
    """--speed and --last, refused in one line each (argparse's own refusal is three, with the usage)."""
    from pilothouse.providers.errors import UserError

    try:
        speed = float(args.speed)
    except ValueError:
        speed = float("nan")
    if not 0 < speed < float("inf"):
        raise UserError(f"replay --speed {args.speed!r}: give a number above 0 (seconds of the job a second), e.g. 10")
    args.speed = speed
    if not str(args.last).isdigit():
        raise UserError(f"replay --last {args.last!r}: give a whole number of events, e.g. 20")
    args.last = int(args.last)


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="a job as it stood at any moment, played back from its event log",
                       description="The job's state at a moment (each task's state, the problems open, the "
                                   "runs going, the last events, tokens and cost so far), read from the event "
                                   "log alone. On a terminal without --json it opens the cockpit's replay.")
    p.add_argument("job", metavar="JOB", help="a job with events in this repository's log")
    p.add_argument("--at", metavar="TIME", help=f"the moment: {_WHEN} (default: the end; on a terminal, the start)")
    # argparse takes `--at -30s` for an unknown option ("expected one argument"), as it does any word
    # after a dash but a bare number; this command has no option that starts with a digit, so a dash
    # and a digit is a value here (the attribute is argparse's own test for that)
    import re

    p._negative_number_matcher = re.compile(r"^-\.?\d")
    p.add_argument("--last", metavar="N", default="10", help="how many of the last events to print")
    p.add_argument("--speed", metavar="N", default="10",
                   help="playing speed on a terminal: seconds of the job a second")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    add_json_flag(p)
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    _checked(args)
    if not args.json and sys.stdout.isatty():
        return _interactive(args)
    return _print(args, *_open(args, default="end"))


def _interactive(args: argparse.Namespace) -> int:
    """The cockpit's replay screen (`pilothouse.tui.replay.run(layout, job, at, speed) -> int`)."""
    layout, player, at = _open(args, default="start")
    import importlib

    # the one way from this command into the cockpit, taken only here (as `view` and `serve` do): by
    # name, so the layers' check sees no core -> tui import and no other command loads Textual
    screen = importlib.import_module("pilothouse.tui.replay")
    return int(screen.run(layout, args.job, at, args.speed))


def _open(args: argparse.Namespace, default: str) -> tuple[Any, Replay, datetime]:
    from pilothouse.core.commands.reports.report import _layout, require_events
    from pilothouse.core.queries.replay import Replay
    from pilothouse.core.state.event_index import EventLookup

    layout = _layout(args.repo)
    with EventLookup(layout.events) as lookup:
        require_events(layout, lookup, args.job)
    player = Replay(layout.events, args.job)
    if player.start is None or player.end is None:
        from pilothouse.core.queries.moments import MAX_AHEAD_S
        from pilothouse.providers.errors import UserError

        raise UserError(f"no event of job {args.job!r} in {layout.events} has a time to replay it at (each is "
                        f"unreadable, or over {MAX_AHEAD_S / 3600:.0f} hours past this machine's clock): "
                        "the log is damaged; `pilothouse report` shows what it says")
    # `--at ""` is a slip (an empty variable), not a wish for the default: moment() refuses it
    at = moment(default if args.at is None else args.at, player.start, player.end)
    if isinstance(at, str) or not player.start <= at <= player.end:
        side = at if isinstance(at, str) else ("before" if at < player.start else "after")
        edge = player.start if side == "before" else player.end
        where = f"{_clock(at)} is" if not isinstance(at, str) else "that is far"
        print(f"replay --at {args.at}: {where} {side} the job ({_clock(player.start)} to "
              f"{_clock(player.end)}); showing {_clock(edge)}", file=sys.stderr)
        at = edge
    return layout, player, at


def moment(text: str, start: datetime, end: datetime) -> datetime | Literal["before", "after"]:
    """`--at` as a moment (not yet clamped to the job); "before" or "after" for one no datetime can
    hold (an offset of 10^20 hours, a year past 9999): past the job's edge all the same."""
    import re
    from datetime import timedelta

    from pilothouse.core.state.events import parse_ts
    from pilothouse.providers.errors import UserError

    word = text.strip().lower()
    if word in ("start", "end"):
        return start if word == "start" else end
    offset = re.fullmatch(r"([+-])(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?(\d+(?:\.\d+)?)?",
                          word)
    if offset and any(offset.groups()[1:]):
        sign, *units, bare = offset.groups()
        h, m, s = (float(g or 0) for g in units)
        if bare is not None:
            # as a clock reads: +1h30 is an hour and a half, +1m30 a minute and a half, +90 seconds
            if units[2] is not None:
                raise UserError(f"replay --at {text!r}: a number after the seconds; give {_WHEN}")
            if units[0] is not None and units[1] is None:
                m += float(bare)
            else:
                s += float(bare)
        seconds = h * 3600 + m * 60 + s  # float: 10^400 hours is inf, never an error here
        side: Literal["before", "after"] = "after" if sign == "+" else "before"
        try:
            return start + timedelta(seconds=seconds) if sign == "+" else end - timedelta(seconds=seconds)
        except OverflowError:  # past timedelta's 10^9 days or datetime's years 1 to 9999
            return side
    dated = re.match(r"(\d{4,})(-\d\d-\d\d.*)", text.strip())
    if dated:
        year, rest = dated.groups()
        if len(year) == 4:
            at = parse_ts(text.strip())
            if at is not None:
                return at
            if year in ("9999", "0001") and parse_ts("2000" + rest) is not None:
                # readable, but its zone moves it out of the years a datetime holds (9999-12-31T23:00-05:00)
                return "after" if year == "9999" else "before"
        if (len(year) > 4 or set(year) == {"0"}) and parse_ts("2000" + rest) is not None:
            # a readable moment in a year no datetime holds: past one edge of any job
            return "before" if set(year) == {"0"} else "after"
    raise UserError(f"replay --at {text!r}: not a moment; give {_WHEN}")


def _clock(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S.") + f"{at.microsecond // 1000:03d} UTC" if at else "—"


def state_at(player: Replay, at: datetime, last: int) -> dict[str, Any]:
    """What `--json` prints: the state at `at`, every worker-written string redacted and inert."""
    from pilothouse.core.queries.describe import describe
    from pilothouse.providers.redact import configured_redactor
    from pilothouse.providers.untrusted import inert
    from pilothouse.providers.usage import cost_label

    tl = player.at(at, by="task")  # each task's attempts and elapsed time: core/queries/task_figures.py
    redact = configured_redactor().redact
    assert player.start is not None
    return {
        "job": tl.job, "at": at.isoformat(), "since_start_s": round((at - player.start).total_seconds(), 3),
        "start": player.start.isoformat(), "end": player.end.isoformat() if player.end else None,
        "state": tl.state, "seq": tl.seq,
        "tasks": [t.model_dump(mode="json") for t in tl.tasks],
        "problems_open": [p.model_dump(mode="json") for p in tl.problems if p.answered is None and p.outcome is None],
        "runs_going": [r.model_dump(mode="json") for r in tl.runs if r.end is None],
        # the runs finished by then: a run reports its tokens and cost when it ends
        "tokens": tl.tokens, "usage": tl.usage, "cost_usd": tl.cost_usd,
        "cost_label": cost_label(tl.usage, (r.provider for r in tl.runs if r.end is not None)),
        "last_events": [{"seq": e.get("seq"), "ts": e.get("ts"), "type": e.get("type"),
                         "task": inert(redact(str(e["task"])), lines=False) if e.get("task") else None,
                         "run": e.get("run"), "text": inert(redact(describe(e)), lines=False)}
                        for e in player.events_until(at, last)],
    }


def _print(args: argparse.Namespace, layout: Any, player: Replay, at: datetime) -> int:
    state = state_at(player, at, args.last)
    if args.json:
        emit_json(state)
        return 0
    from pilothouse.core.queries.task_figures import duration_text
    from pilothouse.providers.untrusted import inert
    from pilothouse.providers.usage import cost_text, tokens_text

    span = (player.end - player.start).total_seconds() if player.end and player.start else 0.0
    out = [f"{state['job']} at {_clock(at)} (+{state['since_start_s']:.1f}s of {span:.1f}s): {state['state']}, "
           f"{tokens_text(state['tokens'], state['usage'])} and {cost_text(state['cost_usd'], state['cost_label'])} "
           "in the runs finished"]
    width = max((len(t["task"]) for t in state["tasks"]), default=0)
    out += ["tasks:"] + [f"  {t['task']:<{width}}  {t['state']:<10} attempts {t['attempts']}  "
                         f"elapsed {duration_text(t['elapsed_s'])}  cost {cost_text(t['cost_usd'], t['cost_label'])}"
                         + (f"  {t['reason']}" if t["reason"] else "") for t in state["tasks"]] if state["tasks"] \
        else ["tasks: none planned yet"]
    out += ["open problems:"] + [f"  {p['code']} {p['kind']} {p['task'] or '(job)'}: {p['summary']}"
                                 for p in state["problems_open"]] if state["problems_open"] else []
    from pilothouse.providers.registry import labelled  # the simulator says so

    out += ["runs going:"] + [f"  {r['run']}  {r['role']} {r['task'] or '(job)'} on {labelled(r['provider'])}"
                              for r in state["runs_going"]] if state["runs_going"] else []
    out += ["last events:"] + [f"  {e['ts'][11:23]}  {e['type']:<16} {e['task'] or '-'}  {e['text']}"
                               for e in state["last_events"]]
    # every line carries log text (reasons, summaries, task names): one line each, inert
    sys.stdout.write("".join(inert(line, lines=False).rstrip() + "\n" for line in out))
    return 0
