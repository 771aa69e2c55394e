"""CLI: `pilothouse ship JOB [--branch NAME] [--squash]`: an accepted job's work onto your branch.

Fast-forwards the base branch (project.yaml `base_branch`, else the branch you have checked out)
to the integration head the job was accepted at, or adds one merge commit when the base branch
moved on; `--squash` makes one commit per task instead; `--branch NAME` leaves the base branch
alone and makes a new branch for a pull request. Refuses, in one line, when your checkout has
uncommitted changes in a file the work would change.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("ship", help="put an accepted job's work onto your base branch (or a new branch)",
                       description="Fast-forward the base branch to the accepted job (a merge commit when it "
                                   "moved on meanwhile). Your checkout changes only by that fast-forward, and "
                                   "not at all when its uncommitted changes touch the same files.")
    p.add_argument("name", metavar="JOB", help="an accepted job")
    p.add_argument("--branch", metavar="NAME", help="make a new branch NAME instead (for a pull request)")
    p.add_argument("--squash", action="store_true", help="one commit per task instead of the job's history")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.set_defaults(func=_ship)


def accepted_head(layout: Any, job: str) -> str | None:
    """The integration head recorded when the job was last accepted (its job.accepted event)."""
    import json

    head = None
    try:
        with open(layout.events, "rb") as fh:
            for raw in fh:
                if b'"job.accepted"' not in raw:
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(ev, dict) and ev.get("type") == "job.accepted" and ev.get("job") == job:
                    head = (ev.get("data") or {}).get("head") or head
    except FileNotFoundError:
        return None
    return head


def ship_job(layout: Any, name: str, branch: str | None = None, squash: bool = False) -> tuple[dict[str, Any], str]:
    """Ship an accepted job (the command's work, for the cockpit too): (what git did, one line
    saying it). Raises UserError, in one line, for anything the operator must change first."""
    from pilothouse.core.commands.jobs import job_states
    from pilothouse.core.git import ship
    from pilothouse.core.git.worktrees import GitError, git
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.project import load_project
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers.errors import UserError

    project = load_project(layout)
    job = load_job(layout, name)
    states, tasks = job_states(layout)
    state = (states.get(job.name) or {}).get("state", "not started")
    head = accepted_head(layout, job.name) if state == "accepted" else None
    if head is None:
        raise UserError(f"job {job.name} is {state}, not accepted: ship takes accepted work only "
                        f"(pilothouse job status {job.name})")
    order = {sha: n for n, sha in enumerate(reversed(git(layout.root, "rev-list", "--first-parent", head).split()))}
    merges = sorted(((t["merged_sha"], t["task"]) for t in tasks.get(job.name, [])
                     if t["state"] == "done" and t["merged_sha"] in order), key=lambda m: order[m[0]])
    try:
        done = ship.ship(layout, project, job.name, head, merges, branch=branch, squash=squash)
    except GitError as exc:  # git's own refusal (a lock, a full disk): its fatal/error line says why
        lines = exc.stderr.strip().splitlines() or [str(exc)]
        why = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[-1])
        raise UserError(f"ship {job.name}: git {exc.argv[0] if exc.argv else ''} failed: {why}") from None
    if done["mode"] == "already":
        return done, f"job {job.name} is already on {done['target']} ({done['new'][:10]})"
    EventLog(layout.events).append("job.shipped", job=job.name, data={
        **done, "reason": f"shipped onto {done['target']} ({done['mode']})"})
    how = {"fast-forward": "fast-forwarded to", "merge": "merge commit", "squash": "one commit per task, up to"}
    return done, f"shipped job {job.name} onto {done['target']}: {how[done['mode']]} {done['new'][:10]}"


def _ship(args: Any) -> int:
    from pilothouse.core.records.layout import find_repo

    layout = find_repo(args.repo)
    done, said = ship_job(layout, args.name, branch=args.branch, squash=args.squash)
    print(said)
    if args.branch and done["mode"] != "already":
        print(f"next: git push -u origin {args.branch}, then open a pull request into {done['base']}")
    return 0
