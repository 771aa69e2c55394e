"""CLI: `pilothouse ship JOB [--per-task | --history] [--branch NAME]`: an accepted job's reviewed change onto your branch.

By default one commit for the whole job, on the base branch (project.yaml `base_branch`, else the
branch you have checked out), whose message names the job, its tasks and their reviews;
`--per-task` makes one commit per task, `--history` keeps every commit (a fast-forward, or a merge
commit when the base moved on). When the base branch moved since the job started, the change is
merged onto it and the full gate runs again before it moves. `--branch NAME` leaves the base branch
alone and makes a new branch for a pull request. Refuses, in one line, when your checkout has
uncommitted changes in a file the work would change, or while the job's own merges are in flight.
After landing on the base branch the job is `shipped`: its branches and worktrees are released.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("ship", help="put an accepted job's reviewed change onto your base branch (or a new branch)",
                       description="One commit for the job on the base branch (its message names the job, its "
                                   "tasks and their reviews); the full gate runs again when the base moved on "
                                   "since the job started. Your checkout changes only by a fast-forward, and not "
                                   "at all when its uncommitted changes touch the same files.")
    p.add_argument("name", metavar="JOB", help="an accepted job")
    p.add_argument("--branch", metavar="NAME", help="make a new branch NAME instead (for a pull request)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--per-task", action="store_true", help="one commit per task instead of one for the job")
    how.add_argument("--history", action="store_true",
                     help="every commit of every attempt, as the job's line holds them (a merge commit)")
    p.add_argument("--json", action="store_true", help="what was shipped, as JSON")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.set_defaults(func=_ship)


def accepted_head(layout: Any, job: str) -> str | None:
    """The job's line's head recorded when the job was last accepted (its job.accepted event)."""
    return _last_data(layout, job, "job.accepted").get("head")


def _last_data(layout: Any, job: str, kind: str) -> dict[str, Any]:
    import json

    data: dict[str, Any] = {}
    needle = f'"{kind}"'.encode()
    try:
        with open(layout.events, "rb") as fh:
            for raw in fh:
                if needle not in raw:
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(ev, dict) and ev.get("type") == kind and ev.get("job") == job:
                    data = ev.get("data") or {}
    except FileNotFoundError:
        return {}
    return data


def _reviews(layout: Any, job: str) -> dict[str | None, str]:
    """The last review verdict of each task (None: the combined review), as the message says it."""
    import json

    said: dict[str | None, str] = {}
    try:
        with open(layout.events, "rb") as fh:
            for raw in fh:
                if b'"review.finished"' not in raw:
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(ev, dict) and ev.get("type") == "review.finished" and ev.get("job") == job:
                    d = ev.get("data") or {}
                    said[ev.get("task")] = f"{d.get('overall') or 'no verdict'} in round {d.get('round') or 1}"
    except FileNotFoundError:
        pass
    return said


def job_message(job: Any, tasks: list[tuple[str, str]], reviews: dict[str | None, str], review_mode: str,
                head: str, line: str) -> str:
    """The job's commit message: the job, what it was asked, each task and its review."""
    # the request's first line, without a markdown heading's marks
    first = next((ln.strip().lstrip("#").strip() for ln in job.request.splitlines() if ln.strip("# \t")), job.name)
    subject = f"{job.name}: {first}"
    subject = subject if len(subject) <= 72 else subject[:71] + "…"
    none = {"off": "no review (workflow.review: off; its gates decided)", "once": "reviewed with the whole job",
            "human": "accepted by the operator"}.get(review_mode, "no review recorded")
    lines = [subject, "", f"Ship job {job.name}: the change its reviews and its full gate passed.", "", "tasks:"]
    lines += [f"- {tid}: {title} (review: {reviews.get(tid, none)})" for tid, title in tasks]
    if None in reviews:
        lines.append(f"combined review: {reviews[None]}")
    lines += ["", f"job: {job.name}", f"reviewed: {head} ({line})"]
    return "\n".join(lines) + "\n"


def ship_job(layout: Any, name: str, branch: str | None = None, how: str = "job") -> tuple[dict[str, Any], str]:
    """Ship an accepted job (the command's work, for the cockpit too): (what git did, one line
    saying it). Raises UserError, in one line, for anything the operator must change first."""
    from pilothouse.core.commands.jobs import job_states
    from pilothouse.core.git import ship
    from pilothouse.core.git.integration import job_line, job_line_idle
    from pilothouse.core.git.worktrees import GitError, git, git_ok
    from pilothouse.core.records.jobs import load_job, record_text
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import load_tasks
    from pilothouse.providers.errors import UserError

    project = load_project(layout)
    job = load_job(layout, name)
    states, tasks = job_states(layout)
    state = (states.get(job.name) or {}).get("state", "not started")
    if state == "shipped":
        done = _last_data(layout, job.name, "job.shipped")
        at = f" ({str(done.get('new'))[:10]})" if done.get("new") else ""
        return ({"mode": "already", **{k: done.get(k) for k in ("base", "target", "previous", "new")}},
                f"job {job.name} is already on {done.get('target') or 'the base branch'}{at}: it was shipped")
    head = accepted_head(layout, job.name) if state == "accepted" else None
    if head is None:
        raise UserError(f"job {job.name} is {state}, not accepted: ship takes accepted work only "
                        f"(pilothouse job status {job.name})")
    busy = [t["task"] for t in tasks.get(job.name, []) if t["state"] in ("approved", "merging")]
    if busy:
        raise UserError(f"job {job.name} still has merges in flight ({', '.join(busy)}): wait for them "
                        f"(pilothouse job wait {job.name}), then ship")
    titles = {t.id: t.title for t in load_tasks(layout, job.name)}
    reviews = _reviews(layout, job.name)
    mode = project.workflow.review
    none = "no review recorded" if mode == "ai" else f"workflow.review: {mode}"
    order = {sha: n for n, sha in enumerate(reversed(git(layout.root, "rev-list", "--first-parent", head).split()))}
    done_tasks = sorted(((t["merged_sha"], t["task"]) for t in tasks.get(job.name, [])
                         if t["state"] == "done" and t["merged_sha"] in order), key=lambda m: order[m[0]])
    merges = [(sha, tid, f"{tid}: {titles.get(tid, tid)}\n\njob: {job.name}\ntask: {tid}\n"
                         f"review: {reviews.get(tid, none)}\n") for sha, tid in done_tasks]
    message = job_message(job, [(tid, titles.get(tid, tid)) for _, tid in done_tasks], reviews, mode, head,
                          job_line(project, job.name))
    record, shipped = _shipped_record(layout, project, job, head, [tid for _, tid in done_tasks])
    tracked = branch is None and git_ok(layout.root, "cat-file", "-e", f"{shipped.outcome.previous}:{record}")

    def extra(wt: Any) -> None:
        # the record says shipped in the very commit that ships: a fresh clone knows it
        from pilothouse.providers import workerfs

        workerfs.write(wt, record, record_text(shipped), mode=0o644)  # the door: wt holds reviewed branch contents
        git(wt, "add", "--", record)

    try:
        with job_line_idle(layout, job.name):
            done = ship.ship(layout, project, job.name, head, merges, message=message, branch=branch, how=how,
                             extra=extra if tracked else None, own=(record,) if tracked else ())
    except GitError as exc:  # git's own refusal (a lock, a full disk): its fatal/error line says why
        lines = exc.stderr.strip().splitlines() or [str(exc)]
        why = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[-1])
        raise UserError(f"ship {job.name}: git {exc.argv[0] if exc.argv else ''} failed: {why}") from None
    if done["mode"] == "already" and branch is None:
        _mark_shipped(layout, job.name, {**done, "reason": f"already on {done['target']}"}, shipped)
        return done, f"job {job.name} is already on {done['target']} ({done['new'][:10]})"
    if done["mode"] == "already":
        return done, f"job {job.name} is already on {done['base']} ({done['new'][:10]}): no branch made"
    again = " after its full gate passed again on the new base" if done["regated"] else ""
    said = f"shipped job {job.name} onto {done['target']}: {done['mode']}, {done['new'][:10]}{again}"
    reason = f"shipped onto {done['target']} ({done['mode']}, {done['new'][:10]})"
    if branch is None:
        _mark_shipped(layout, job.name, {**done, "reason": reason}, shipped)
        if not tracked:
            import shlex

            # every record git does not know yet, not only the job's: a clone without the job's
            # tasks.yaml holds a record that names tasks it cannot read
            loose = git(layout.root, "ls-files", "-z", "--others", "--exclude-standard", "--", ".ai",
                        check=False, strip=False).split("\0")
            records = sorted({record, *(f for f in loose if f)})
            said += (f"; its record {record} says shipped: commit it with the other .ai/ records git does not "
                     f"know yet (git add {' '.join(shlex.quote(f) for f in records)} && git commit) so a fresh "
                     f"clone knows")
    else:
        from pilothouse.core.state.events import EventLog

        EventLog(layout.events).append("job.shipped", job=job.name, data={**done, "reason": reason})
    return done, said


def _shipped_record(layout: Any, project: Any, job: Any, head: str, tasks: list[str]) -> tuple[str, Any]:
    """(the record's path in the repository, the job's record as it is once shipped)."""
    from pilothouse.core.git.integration import base_branch
    from pilothouse.core.git.worktrees import git
    from pilothouse.core.records.jobs import Outcome
    from pilothouse.core.state.events import utc_now_iso

    base = base_branch(layout, project)
    start = git(layout.root, "rev-parse", "--verify", f"refs/heads/{base}^{{commit}}")
    outcome = Outcome(state="shipped", revision=job.revision, at=utc_now_iso(), head=head, onto=base,
                      previous=start, tasks=tasks)
    return f".ai/jobs/{job.name}.json", job.model_copy(update={"outcome": outcome})


def _mark_shipped(layout: Any, job: str, data: dict[str, Any], shipped: Any) -> None:
    """The job is `shipped` (one transaction, its job.shipped event; its record says so), and what
    it held is released: its worktrees, its ph/ branches and its line (what they held is on the
    base branch now)."""
    from pilothouse.core.records.jobs import record_outcome
    from pilothouse.core.state import store
    from pilothouse.core.state.events import EventLog
    from pilothouse.core.supervisor.state import StateStore

    conn = store.connect(layout.state_db)
    try:
        StateStore(layout, conn, EventLog(layout.events)).set_job(job, "job.shipped", reason=data["reason"],
                                                                  state="shipped", event_data=data)
    finally:
        conn.close()
    try:
        record_outcome(layout, job, shipped.outcome)  # where the base is checked out: what the ship wrote
    except Exception:  # noqa: BLE001,S110 - the job shipped; the store and the event say so
        pass
    release_job(layout, job)


def release_job(layout: Any, job: str) -> dict[str, list[str]]:
    """Remove a shipped job's worktrees and branches; a branch checked out in a checkout of the
    operator's own stays. Never raises: the job shipped whatever cleanup finds."""
    from pilothouse.core.git.worktrees import git_run, remove_worktree
    from pilothouse.core.upkeep.ending import job_leftovers

    gone: dict[str, list[str]] = {"worktrees": [], "branches": []}
    try:
        left = job_leftovers(layout, job)
    except Exception:  # noqa: BLE001 - cleanup must not undo a ship
        return gone
    for path in left["worktrees"]:
        try:
            remove_worktree(layout, path, force=True)
            gone["worktrees"].append(path)
        except Exception:  # noqa: BLE001,S112 - one that cannot go is listed by maintain worktrees
            continue
    for branch in left["branches"]:
        if git_run(layout.root, "branch", "-D", branch).returncode == 0:
            gone["branches"].append(branch)
    return gone


def _ship(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records.layout import find_repo

    layout = find_repo(args.repo)
    how = "per-task" if args.per_task else "history" if args.history else "job"
    done, said = ship_job(layout, args.name, branch=args.branch, how=how)
    if args.json:
        emit_json({**done, "said": said})
        return 0
    print(said)
    if args.branch and done["mode"] != "already":
        print(f"next: git push -u origin {args.branch}, then open a pull request into {done['base']}")
    return 0
