"""CLI: getting out of a bad job (added to the `job` group).

    pilothouse job cancel NAME              stop its runs, close its problems; its branches stay
    pilothouse job delete NAME [--yes]      also remove its worktrees, branches and record
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register_job_subcommands(job_sub: Any) -> None:
    c = job_sub.add_parser("cancel", help="stop a job: its runs end, its problems close, its commits stay",
                           description="Stops the job's running workers, closes its open problems and marks "
                                       "its unfinished tasks cancelled. Commits stay on their ph/JOB/TASK "
                                       "branches and the worktrees stay for inspection. A correction "
                                       "(job update) plans it again.")
    c.add_argument("name")
    c.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    c.set_defaults(func=_cancel)
    d = job_sub.add_parser("delete", help="cancel a job and remove its worktrees, branches and record",
                           description="Cancels the job, then removes its worktrees (uncommitted work in them "
                                       "too), its ph/JOB/ branches, its task definitions and its record. "
                                       "Merges already on the integration branch stay.")
    d.add_argument("name")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts)")
    d.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    d.set_defaults(func=_delete)


def _paused_supervisor(layout: Any, action: Any) -> Any:
    """Run `action` with this repository's supervisor stopped (it is the only writer of job state),
    starting it again afterwards for the other jobs; workers of other jobs keep running meanwhile."""
    from pilothouse.core.supervisor import control as supervisor_ctl

    running = supervisor_ctl.status(layout) is not None
    if running:
        supervisor_ctl.stop(layout)
    try:
        return action()
    finally:
        if running:
            supervisor_ctl.start(layout)


def _cancel(args: Any) -> int:
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.upkeep import ending

    layout = find_repo(args.repo)
    job = load_job(layout, args.name)
    done = _paused_supervisor(layout, lambda: ending.cancel_job(layout, job.name))
    if done["already"] and not (done["runs"] or done["tasks"] or done["problems"]):
        print(f"job {job.name} was already cancelled")
        return 0
    print(f"cancelled job {job.name}: {len(done['runs'])} run(s) stopped, {len(done['tasks'])} task(s) cancelled, "
          f"{len(done['problems'])} problem(s) closed; its commits stay on ph/{job.name}/* "
          f"(remove everything: pilothouse job delete {job.name})")
    return 0


def _delete(args: Any) -> int:
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.upkeep import ending
    from pilothouse.providers.errors import UserError

    layout = find_repo(args.repo)
    job = load_job(layout, args.name)
    left = ending.job_leftovers(layout, job.name)
    what = (f"job {job.name}: its record, {len(left['worktrees'])} worktree(s) (uncommitted work in them too) "
            f"and {len(left['branches'])} branch(es)")
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError(f"job delete removes {what}: pass --yes to confirm (there is no terminal to ask)")
        answer = input(f"delete {what}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing deleted")
            return 1
    done = _paused_supervisor(layout, lambda: ending.delete_job(layout, job.name))
    print(f"deleted job {job.name}: {len(done['worktrees'])} worktree(s), {len(done['branches'])} branch(es), "
          f"{len(done['runs'])} run(s) stopped; merges already on the integration branch stay")
    if done["kept"]:
        print(f"kept {', '.join(done['kept'])}: checked out in a checkout of yours (git worktree list); "
              "delete it there when done (git branch -D NAME)")
    return 0
