"""CLI: `pilothouse maintain runs|logs --older-than-days N [--keep M]`, `maintain worktrees list|remove`."""

from __future__ import annotations

import argparse

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("maintain", help="prune old run sandboxes and logs; list or remove worktrees")
    actions = p.add_subparsers(dest="maintain_action", metavar="ACTION", required=True)
    for name, what in (("runs", "run sandboxes (providers/<key>/runs/<run_id>)"),
                       ("logs", "run logs (logs/<key>/<run_id>.*)")):
        a = actions.add_parser(name, help=f"delete old {what}")
        a.add_argument("--older-than-days", type=float, required=True, metavar="N")
        a.add_argument("--keep", type=int, default=0, metavar="M", help="always keep the newest M per provider")
        a.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
        add_json_flag(a)
        a.set_defaults(func=cmd_prune, what=name)
    w = actions.add_parser("worktrees", help="pilothouse's git worktrees of this repository")
    wa = w.add_subparsers(dest="worktrees_action", metavar="ACTION", required=True)
    wl = wa.add_parser("list", help="list them")
    wl.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    add_json_flag(wl)
    wl.set_defaults(func=cmd_worktrees_list)
    wr = wa.add_parser("remove", help="remove one task's worktree (its branch and commits stay)")
    wr.add_argument("path")
    wr.add_argument("--force", action="store_true", help="discard its uncommitted changes too")
    wr.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    wr.set_defaults(func=cmd_worktrees_remove)
    r = actions.add_parser("repair", help="rebuild a missing, damaged or other-version state.db from .ai/ "
                                          "and the event log (the damaged file is kept aside)")
    r.add_argument("--force", action="store_true", help="rebuild even a store that reads fine")
    r.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    add_json_flag(r)
    r.set_defaults(func=cmd_repair)


def cmd_repair(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.upkeep.repair import repair

    report = repair(find_repo(args.repo), force=args.force)
    if args.json:
        emit_json(asdict(report))
        return 0
    for line in report.lines():
        print(line)
    print("next: pilothouse job start")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from pilothouse.providers import maintenance
    from pilothouse.providers.errors import UserError

    if args.older_than_days < 0 or args.keep < 0:
        raise UserError("--older-than-days and --keep must be 0 or more")
    fn = maintenance.prune_runs if args.what == "runs" else maintenance.prune_logs
    removed = fn(args.older_than_days, keep=args.keep, dry_run=args.dry_run)
    if args.json:
        emit_json(removed)
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {len(removed)} {'run sandboxes' if args.what == 'runs' else 'run logs'}")
    for r in removed:
        print(f"  {r['provider']}/{r['run_id']} ({r['age_days']} days old)")
    return 0


def _layout(args: argparse.Namespace) -> Any:
    from pilothouse.core.records.layout import find_repo

    return find_repo(getattr(args, "repo", None))


def cmd_worktrees_list(args: argparse.Namespace) -> int:
    from pilothouse.core.git import worktrees

    rows = worktrees.list_worktrees(_layout(args))
    if args.json:
        emit_json(rows)
        return 0
    print_table(("PATH", "BRANCH", "JOB", "TASK"), [(r.get("path"), r.get("branch"), r.get("job"), r.get("task"))
                                                   for r in rows])
    return 0


def cmd_worktrees_remove(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pilothouse.core.git import worktrees

    layout = _layout(args)
    _refuse_busy(layout, Path(args.path).absolute())
    worktrees.remove_worktree(layout, args.path, force=args.force)
    print(f"removed worktree {args.path}")
    return 0


def _refuse_busy(layout: Any, path: Path) -> None:
    """A worker, gate or merge may be using it: removing it under them loses their work."""
    from pathlib import Path

    from pilothouse.core.state import store
    from pilothouse.core.supervisor.state import ACTIVE
    from pilothouse.providers.errors import UserError

    if not layout.state_db.exists():
        return
    conn = store.connect(layout.state_db, readonly=True)
    try:
        marks = ",".join("?" * len(ACTIVE))
        rows = conn.execute(f"SELECT job, task, state, worktree FROM tasks WHERE state IN ({marks})",
                            ACTIVE).fetchall()
    finally:
        conn.close()
    real = path.resolve()
    for r in rows:
        if r["worktree"] and Path(r["worktree"]).resolve().is_relative_to(real):
            raise UserError(f"task {r['job']}/{r['task']} is {r['state']} in {r['worktree']}: let it finish, or "
                            "skip it first (pilothouse problem list), then remove the worktree")
