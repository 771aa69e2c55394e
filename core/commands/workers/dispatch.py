"""CLI: dispatch, run, fanout, template, resume (docs/contracts.md). Stdlib only at module level (and
providers.modes, which imports nothing)."""

from __future__ import annotations

import argparse
import sys
import types

from pilothouse.core.commands._out import positive_int, positive_seconds
from pilothouse.providers.modes import MODES

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Usage errors as exactly one line (scripts read dispatch's output; a usage block is noise)."""
    def error(self: argparse.ArgumentParser, message: str) -> Any:
        sys.stderr.write(f"{self.prog}: {message} (see `{self.prog} --help`)\n")
        sys.exit(2)
    parser.error = types.MethodType(error, parser)  # type: ignore[method-assign]
    return parser


def _run_options(p: argparse.ArgumentParser, task_required: bool = True, with_provider: bool = True,
                 run_id_flag: str = "--run-id") -> None:
    if with_provider:
        # not required for `run`, whose `--watch` form (the supervisor) takes none of them
        p.add_argument("--provider", required=task_required, help="provider key (see `pilothouse providers list`; add your own in the folder "
                       "`pilothouse providers path` prints)")
        p.add_argument("--mode", required=task_required, choices=MODES, help="what the worker may do")
        p.add_argument("--workdir", required=task_required, help="the directory the worker works in")
    p.add_argument("--task-file", required=task_required, help="the task (markdown); see `pilothouse template`")
    p.add_argument(run_id_flag, dest="run_id", help="id for this run (default: timestamp + random)")
    p.add_argument("--scenario", help="sim only: scenario name or YAML path (else $PILOTHOUSE_SIM_SCENARIO)")
    p.add_argument("--model", help="override the provider's model id")
    p.add_argument("--step-cap", type=positive_int, help="most model turns the worker may take")
    p.add_argument("--timeout", type=positive_seconds, help="overall timeout in seconds (default 1800)")
    p.add_argument("--idle-timeout", type=positive_seconds, help="end the run after N s without output (default 300)")
    p.add_argument("--job", help="the job the run works for: an agent CLI worker can read its request, "
                   "decisions and screenshots through a read-only MCP server")
    p.add_argument("--in-place", action="store_true", help="code/resume/test: let the worker write into a "
                   "repository's own checkout set up for pilothouse (else refused, or asked on a terminal: "
                   "a worktree is the place to try)")


def register(sub: Any) -> None:
    p = _one_line_errors(sub.add_parser(
        "dispatch", help="run one bounded task; prints two JSON lines (started, verdict)",
        description="Run one bounded task on one worker. stdout is exactly two JSON lines: "
        "pilothouse.started and pilothouse.verdict. Exit 0 whenever a verdict was printed."))
    _run_options(p)
    p.add_argument("--session", help="continue this session (with --resume-of)")
    p.add_argument("--resume-of", help="the run whose session and sandbox to continue")
    p.set_defaults(func=cmd_dispatch)

    p = _one_line_errors(sub.add_parser(
        "run", help="run one task and stream its events for a human (or: run --watch, the supervisor)"))
    _run_options(p, task_required=False)
    p.add_argument("--task", help="the task text (instead of --task-file)")
    p.add_argument("--session", help=argparse.SUPPRESS)
    p.add_argument("--resume-of", help="the run whose session and sandbox to continue")
    p.set_defaults(func=cmd_run)
    try:
        from pilothouse.core.commands.supervise import add_watch_options
    except ImportError:
        pass
    else:
        add_watch_options(p)

    p = _one_line_errors(sub.add_parser(
        "resume", help="continue an earlier run's session with a new message",
        description="Continue the session of an earlier run (same provider, same sandbox) with a new "
        "task message. Prints two JSON lines like dispatch."))
    p.add_argument("--run-id", dest="resume_of", required=True, help="the run to continue")
    _run_options(p, with_provider=False, run_id_flag="--new-run-id")
    p.set_defaults(func=cmd_resume)

    p = _one_line_errors(sub.add_parser(
        "fanout", help="run several dispatches concurrently; prints one JSON array of verdicts",
        description="--jobs FILE is a JSON array of objects with the dispatch options as keys "
        "(provider, mode, workdir, task_file or task, and optionally run_id, scenario, model, "
        "step_cap, timeout, idle_timeout, session, resume_of)."))
    p.add_argument("--jobs", required=True, help="JSON file listing the dispatches")
    p.add_argument("--max-parallel", type=positive_int, default=4, help="at most N at once (default 4)")
    p.set_defaults(func=cmd_fanout)

    p = _one_line_errors(sub.add_parser("template", help="print a task template for a mode"))
    p.add_argument("mode", choices=MODES)
    p.set_defaults(func=cmd_template)


def _options(args: argparse.Namespace, **over: Any) -> Any:
    from pilothouse.core.dispatch.prepare import DispatchOptions

    fields = dict(provider=getattr(args, "provider", None), mode=getattr(args, "mode", None),
                  workdir=getattr(args, "workdir", None), task_file=args.task_file,
                  task_text=getattr(args, "task", None), run_id=args.run_id,
                  session=getattr(args, "session", None), resume_of=getattr(args, "resume_of", None),
                  scenario=args.scenario, model=args.model, step_cap=args.step_cap, timeout=args.timeout,
                  idle_timeout=args.idle_timeout, job=getattr(args, "job", None))
    fields.update(over)
    return DispatchOptions(**fields)


def _dispatch(opts: Any, on_event: Any = None, emit: Any = None) -> dict[str, Any]:
    from pilothouse.core.dispatch.prepare import prepare, refuse_line
    from pilothouse.core.dispatch.run import execute
    from pilothouse.providers.errors import UserError

    try:
        prep = prepare(opts)
    except UserError as exc:
        refuse_line(str(opts.provider), str(exc))
        raise
    kwargs: dict[str, Any] = {"on_event": on_event}
    if emit is not None:
        kwargs["emit"] = emit
    return execute(prep, **kwargs)


def writes_into_checkout(mode: str, workdir: str, in_place: bool, *, ask: bool | None = None) -> str | None:
    """Refuse (or ask on a terminal) a dispatch that would write into the operator's own checkout
    of a repository set up for pilothouse (.ai/project.yaml): jobs work in worktrees, and a
    rehearsal there edits the operator's files without a word. Any other checkout gets a note on
    stderr, returned for the caller to show. None: nothing to say."""
    import os
    import subprocess
    from pathlib import Path

    from pilothouse.providers.errors import UserError

    if mode not in ("code", "resume", "test") or in_place:
        return None
    where = Path(workdir).resolve()
    probe = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel", "--git-dir",
                            "--git-common-dir"], capture_output=True, text=True)
    lines = probe.stdout.splitlines()
    if probe.returncode != 0 or len(lines) != 3:
        return None  # not a git checkout: nothing of the operator's is tracked there
    top, git_dir, common = lines
    linked = (where / git_dir).resolve() != (where / common).resolve()
    if linked:
        return None  # a worktree: the place for it
    hint = (f"try it in a worktree instead: git -C {top} worktree add ../{Path(top).name}-try -b try "
            f"&& pilothouse dispatch … --workdir ../{Path(top).name}-try")
    if not (Path(top) / ".ai" / "project.yaml").is_file():
        return f"note: {mode} dispatch writes into {top} itself, not a worktree; {hint}"
    tty = sys.stdin.isatty() if ask is None else ask
    if tty:
        answer = input(f"{mode} dispatch writes into your checkout {top} (not a worktree). Go on? [y/N] ")
        if answer.strip().lower() in ("y", "yes"):
            return None
    raise UserError(f"{mode} dispatch would write into your own checkout {top}: pass --in-place to allow it, or "
                    f"{hint}" + ("" if tty else f" (set up for pilothouse: {os.path.join(top, '.ai/project.yaml')})"))


def _say_where(args: argparse.Namespace, mode: str | None = None, workdir: str | None = None) -> None:
    note = writes_into_checkout(str(mode or args.mode), str(workdir or args.workdir), bool(args.in_place))
    if note:
        print(f"pilothouse: {note}", file=sys.stderr)


def _end_with_parent() -> None:
    """A dispatch started by a cluster node's actor is a session of its own (so a cancel can signal
    its whole group). Ray's raylet ends a dead worker's children where it can act as their
    subreaper; this holds without that: when the actor dies the kernel sends the dispatch SIGTERM (it
    aborts its worker and still answers), and a parent gone before this point ends it here."""
    import os
    import signal

    from pilothouse.core.dispatch.prepare import PARENT_ENV

    parent = os.environ.pop(PARENT_ENV, "")
    if not parent.isdigit():
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):
        raise SystemExit("pilothouse dispatch: the node's actor that started it is gone; nothing was run")


def cmd_dispatch(args: argparse.Namespace) -> int:
    _end_with_parent()
    _say_where(args)
    _dispatch(_options(args))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    import os

    from pilothouse.core.dispatch.prepare import find_previous_run

    prev = find_previous_run(args.resume_of)
    workdir = prev["workdir"] or os.getcwd()
    _say_where(args, "resume", workdir)
    _dispatch(_options(args, provider=prev["provider"], mode="resume", workdir=workdir,
                       session=prev["session_id"]))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pilothouse.core.dispatch.verdict import human_summary
    from pilothouse.providers.errors import UserError

    if getattr(args, "watch", False) or getattr(args, "once", False):
        from pilothouse.core.commands.supervise import run_supervisor

        return int(run_supervisor(args))
    missing = [f"--{n}" for n in ("provider", "mode", "workdir") if not getattr(args, n)]
    if missing:
        raise UserError(f"run needs {', '.join(missing)} (or --watch to run the supervisor)")
    if not args.task_file and not args.task:
        raise UserError("no task given; pass --task-file FILE or --task TEXT")
    _say_where(args)

    from pilothouse.providers.untrusted import inert

    def show(ev: Any) -> None:
        # every field is the worker's (its text, its tool calls' names): inert, a tool line one line
        k = ev.kind
        if k == "text":
            print(inert(ev.text).rstrip(), flush=True)
        elif k == "tool" and ev.status != "started":
            print(inert(f"  · {ev.name} {ev.brief} [{ev.status}]", lines=False), flush=True)
        elif k == "error":
            print(inert(f"  ! {ev.error_class}: {ev.message}", lines=False), flush=True)
        elif k == "quota":
            print(f"  ! quota window {ev.window} resets at {ev.resets_at or 'unknown'}", flush=True)

    def emit(line: str) -> None:
        import json

        d = json.loads(line)
        if d["type"] == "pilothouse.started":
            print(f"▶ {d['run_id']} · {d['provider']} ({d['runner']}, {d['model']}) · {d['mode']} · {d['workdir']}",
                  flush=True)

    v = _dispatch(_options(args), on_event=show, emit=emit)
    print(inert(f"■ {human_summary(v)}" + (f" — {v['error']}" if v.get("error") else ""), lines=False))
    print(f"  report: {v['final_text_path']}")
    return 0 if v["verdict"] in ("completed", "partial") else 1


def cmd_fanout(args: argparse.Namespace) -> int:
    from pilothouse.core.dispatch.fanout import fanout, load_jobs

    results = fanout(load_jobs(args.jobs), max_parallel=args.max_parallel)
    import json

    sys.stdout.write(json.dumps(results, separators=(",", ":")) + "\n")
    return 0


def cmd_template(args: argparse.Namespace) -> int:
    from pilothouse.providers import paths

    sys.stdout.write((paths.package_data() / "prompts" / "templates" / f"{args.mode}.md").read_text())
    return 0
