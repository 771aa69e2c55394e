"""CLI: `pilothouse report JOB [--html FILE | --md] [--json]` — a job's story in one file to share.

Read from the event log alone (core/queries/timeline.py), so it works on a `.ai/` copied from
another machine: the timeline, each task's outcome, the gate runs, the review rounds, the problems
and who answered them how, tokens and cost by role and provider with their labels, the shipped
commit. HTML is one self-contained page (inline SVG and CSS, no script, a CSP that forbids loading
anything); Markdown goes to stdout; --json prints the model itself.
"""

from __future__ import annotations

import argparse

from pilothouse.core.commands._out import add_json_flag, emit_json, say_skips

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="a job's timeline and story as one file to share (HTML or Markdown)",
                       description="A job's timeline, task outcomes, gate runs, review rounds, problems and "
                                   "answers, tokens and cost by role and provider, and the shipped commit, "
                                   "read from the event log alone.")
    p.add_argument("job", metavar="JOB", help="a job with events in this repository's log")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--html", metavar="FILE", help="write a self-contained HTML page to FILE")
    fmt.add_argument("--md", action="store_true", help="print Markdown (the default)")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    add_json_flag(p)
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pilothouse.core.queries import timeline
    from pilothouse.core.state.event_index import EventLookup
    from pilothouse.providers.errors import UserError

    layout = _layout(args.repo)
    if args.json and args.html:
        raise UserError("report --json prints the model; drop --html FILE, or drop --json to write the page")
    with EventLookup(layout.events) as lookup:
        require_events(layout, lookup, args.job)
    tl = timeline.fold_of(layout.events, args.job).snapshot("slot")
    from pilothouse.core.commands.reports import render

    if args.json:
        emit_json(render.as_json(tl))
        return 0
    if args.html:
        from pilothouse.providers.fsutil import atomic_write_text

        out = Path(args.html).expanduser()
        if not out.parent.is_dir():
            raise UserError(f"report --html {args.html}: the folder {out.parent} does not exist; create it or "
                            "name a file in an existing folder")
        try:
            atomic_write_text(out, render.html_page(tl))
        except OSError as exc:
            raise UserError(f"report --html {args.html}: cannot write it ({exc.strerror}); name a file you "
                            "can write") from exc
        print(f"wrote {out}")
        return 0
    print(render.markdown(tl), end="")
    return 0


def _layout(repo: str | None) -> Any:
    """The repository; or, given a folder that holds a `.ai/` copied from elsewhere (no git), that.
    One pilothouse was never set up in is refused in one line."""
    from pathlib import Path

    from pilothouse.core.records.layout import RepoLayout, find_repo, require_set_up

    if repo:
        here = RepoLayout(Path(repo).expanduser().resolve())
        if here.events.is_file():
            return here
    layout = find_repo(repo)
    require_set_up(layout)
    return layout


def require_events(layout: Any, lookup: Any, job: str) -> None:
    """Refuse, in one line, a job the log has no events of: a log that is missing although the job
    exists is said as such (not as a job nobody knows). Lines of the log that are not events are said
    once on stderr, as every reader does."""
    import os

    from pilothouse.providers.errors import UserError

    say_skips(lookup)
    if lookup.has_job(job):
        return
    if not os.path.lexists(layout.events):
        from pilothouse.core.records.state_witness import missing_log

        missing = missing_log(layout, job)
        if missing:
            raise UserError(missing)
        raise UserError(f"no job named {job!r} and no event log yet ({layout.events} does not exist): "
                        "see `pilothouse job list` for this repository's jobs")
    raise UserError(f"no events of a job named {job!r} in {layout.events}: "
                    "see `pilothouse job list` for this repository's jobs")
