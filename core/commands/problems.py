"""CLI group 'problems': what waits for the operator, and the one-word answers.

    pilothouse problem list [--all] [--job J] [--json]
    pilothouse problem act CODE REPLY [WORDS…]
    pilothouse problem show CODE [--json]
    pilothouse task retry TASK [--job J]        (registered into the 'task' group)
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def _layout(args: Any) -> Any:
    from pilothouse.core.records.layout import find_repo

    return find_repo(getattr(args, "repo", None))


def _add_repo(p: Any) -> None:
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")


def register(sub: Any) -> None:
    p = sub.add_parser("problem", aliases=["problems"], help="what stopped and waits for your answer",
                       description="Problems are stops automatic retries could not fix. Answer each "
                                   "with one reply: retry, accept, skip, dismiss, hint WORDS, plan WORDS.")
    ps = p.add_subparsers(dest="problem_cmd", metavar="ACTION")
    ls = ps.add_parser("list", help="open problems with their codes and the replies that fit")
    ls.add_argument("--all", action="store_true", help="include closed problems")
    ls.add_argument("--job", help="only this job's problems")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    _add_repo(ls)
    ls.set_defaults(func=_list)
    show = ps.add_parser("show", help="one problem in full: summary, evidence, replies")
    show.add_argument("code")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    _add_repo(show)
    show.set_defaults(func=_show)
    act = ps.add_parser("act", help="answer a problem", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=_replies_help())
    act.add_argument("code", help="the six-letter code (case does not matter)")
    act.add_argument("reply", help="retry | accept | skip | dismiss | hint | plan")
    act.add_argument("words", nargs="*", help="your words, for hint and plan")
    act.add_argument("--who", help="recorded as who answered (default: USER@cli)")
    act.add_argument("--json", action="store_true", help="machine-readable output")
    _add_repo(act)
    act.set_defaults(func=_act)
    p.set_defaults(func=_list, all=False, job=None, json=False, repo=None)


def _replies_help() -> str:
    from pilothouse.core.stops.replies import REPLY_HELP  # stdlib-only: register() runs on every command

    return "replies:\n" + "\n".join(f"  {r:<8} {h}" for r, h in REPLY_HELP.items())


def register_task_subcommands(task_sub: Any) -> None:
    """Called by the 'tasks' group with its subparsers: adds `task retry TASK`."""
    r = task_sub.add_parser("retry", help="run a stopped task's step again (answers its problem with retry)")
    r.add_argument("task", help="the task id")
    r.add_argument("--job", help="the task's job (needed when two jobs have a task with this id)")
    r.add_argument("--who", help="recorded as who answered (default: USER@cli)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    _add_repo(r)
    r.set_defaults(func=_task_retry)


def _fmt_problem(p: Any) -> str:
    where = f"{p.job}/{p.task}" if p.task else p.job
    return f"{p.code}  {where}  {p.kind}  [{' | '.join(p.replies)}]"


def _list(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.stops import problems

    layout = _layout(args)
    items = problems.list_problems(layout, open_only=not args.all, job=args.job)
    if args.json:
        emit_json([p.as_dict() for p in items])
        return 0
    if not items:
        print("no open problems" if not args.all else "no problems recorded")
        return 0
    rows = []
    for p in items:
        if p.pending:
            status = f"answered {p.pending['reply']} (waiting for the supervisor)"
        elif p.state == "answered":
            status = f"answered {p.answer} (being applied)"
        elif p.state == "closed":
            status = f"closed ({p.answer or 'resolved'})"
        else:
            status = "open: " + " | ".join(p.replies)
        rows.append([p.code, p.job, p.task or "-", p.kind, status])
    print_table(["CODE", "JOB", "TASK", "KIND", "STATUS / REPLIES"], rows)
    for p in items:
        if p.state == "open" and not p.pending:
            print(f"\n{p.code}: {p.summary}")
    print("\nanswer with: pilothouse problem act CODE REPLY [WORDS…]")
    return 0


def _show(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.stops import problems
    from pilothouse.core.stops.replies import REPLY_HELP

    layout = _layout(args)
    p = problems.get_problem(layout, args.code)
    preview = problems.skip_preview(layout, p.code) if "skip" in p.replies else []
    if args.json:
        emit_json({**p.as_dict(), "skip_cancels": preview})
        return 0
    print(_fmt_problem(p))
    print(f"state: {p.state}  opened: {p.opened_at}" + (f"  answer: {p.answer} by {p.who}" if p.answer else ""))
    print(p.summary)
    for k, v in p.evidence.items():
        text = str(v)
        print(f"  {k}: " + (text if "\n" not in text else "\n    " + text.replace("\n", "\n    ")))
    print("replies:")
    for r in p.replies:
        extra = f" (cancels: {', '.join(preview)})" if r == "skip" and preview else ""
        print(f"  {r:<8} {REPLY_HELP[r]}{extra}")
    return 0


def _act(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.stops import answering

    layout = _layout(args)
    data = answering.act(layout, args.code, args.reply, " ".join(args.words) or None, who=args.who)
    if args.json:
        emit_json(data)
        return 0
    msg = f"{data['code']}: {data['reply']} recorded ({data['who']})"
    if data.get("cancels"):
        msg += f"; cancels {', '.join(data['cancels'])}"
    print(msg + _supervisor_note(layout))
    return 0


def _supervisor_note(layout: Any) -> str:
    try:
        from pilothouse.core.supervisor import control as supervisor_ctl

        running = supervisor_ctl.status(layout)
    except Exception:  # no supervisor module or no state yet: say nothing wrong
        return ""
    if running:
        return "; the supervisor applies it now"
    return "; start the supervisor to apply it: pilothouse job start"


def _task_retry(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.state import store
    from pilothouse.core.stops import answering, problems
    from pilothouse.providers.errors import UserError

    layout = _layout(args)
    if not layout.state_db.exists():
        raise UserError(f"no job has run in {layout.root} yet: nothing to retry")
    conn = store.connect(layout.state_db)
    try:
        sql, params = "SELECT job, task, state FROM tasks WHERE task = ?", [args.task]
        if args.job:
            sql, params = sql + " AND job = ?", [args.task, args.job]
        rows = conn.execute(sql, params).fetchall()
        if not rows:
            raise UserError(f"no task '{args.task}'" + (f" in job {args.job}" if args.job else "")
                            + ": see `pilothouse job status`")
        if len(rows) > 1:
            raise UserError(f"task '{args.task}' is in jobs {', '.join(r['job'] for r in rows)}: pass --job J")
        job = rows[0]["job"]
        problem = problems.open_problem_for(layout, job, args.task, conn=conn)
        if problem is None:
            raise UserError(f"task {job}/{args.task} is {rows[0]['state']} with no open problem: nothing to retry")
        data = answering.act(layout, problem.code, "retry", who=args.who, conn=conn)
    finally:
        conn.close()
    if args.json:
        emit_json(data)
    else:
        print(f"{job}/{args.task}: retry recorded for problem {data['code']}" + _supervisor_note(layout))
    return 0
