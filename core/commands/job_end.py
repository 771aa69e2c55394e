"""CLI: how a job ends (added to the `job` group): waiting for it, and getting out of a bad one.

    pilothouse job wait NAME [--timeout S]  0 accepted, 3 waiting for you, 1 failed,
                                            2 usage error / no supervisor, 124 timed out
    pilothouse job cancel NAME              stop its runs, close its problems; its branches stay
    pilothouse job delete NAME [--yes]      also remove its worktrees, branches and record
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

EXIT_ACCEPTED, EXIT_FAILED, EXIT_WAITING = 0, 1, 3
EXIT_TIMEOUT = 124  # as timeout(1): a script can tell "still running" from "failed"


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
                                       "too), its ph/JOB/ branches and its integration line, its task definitions "
                                       "and its record. What was shipped stays on your branch.")
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
          f"{len(done['runs'])} run(s) stopped; what was shipped stays on your branch")
    if done["kept"]:
        print(f"kept {', '.join(done['kept'])}: checked out in a checkout of yours (git worktree list); "
              "delete it there when done (git branch -D NAME)")
    return 0


def job_outcome(layout: Any, name: str) -> tuple[str | None, str]:
    """("accepted"|"failed"|"waiting"|None, reason) for a job, read from the store."""
    import sqlite3

    from pilothouse.core.state import store

    if not layout.state_db.exists():
        return None, ""
    conn = store.connect(layout.state_db, readonly=True)
    try:
        conn.execute("BEGIN")  # one read transaction: the job's row and its problems from one moment
        row = conn.execute("SELECT state, reason FROM jobs_state WHERE job=?", (name,)).fetchone()
        # an answer the supervisor has not applied yet means the job is about to move again
        pending = conn.execute("SELECT count(*) FROM problems WHERE job=? AND (state='answered' OR code IN"
                               " (SELECT code FROM replies WHERE consumed_at IS NULL))", (name,)).fetchone()[0]
        # a job is the operator's turn only while a problem waits for
        # them. Blocked with none open is a moment inside one supervisor pass (an applied answer
        # closed its problem; the pass unblocks the job next), which a waiter must not take as the end
        unanswered = conn.execute("SELECT count(*) FROM problems WHERE job=? AND state='open'",
                                  (name,)).fetchone()[0]
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None, ""  # an empty store (being made, or its maker ran out of disk): nothing known yet
    finally:
        conn.close()
    if row is None:
        return None, ""
    state = row["state"]
    if state in ("accepted", "shipped"):
        return "accepted", row["reason"] or ""
    if state in ("failed", "cancelled"):
        return "failed", row["reason"] or ""
    if state == "blocked" and not pending and unanswered:
        return "waiting", row["reason"] or ""
    return None, row["reason"] or ""


def print_waiting(layout: Any, name: str, out: Any = None) -> None:
    """Each open problem of the job: its code and the replies that fit, one per line."""
    from pilothouse.core.stops import problems

    out = out or sys.stdout
    found = problems.list_problems(layout, True, job=name)
    for p in found:
        out.write(f"{p.code} {' '.join(p.replies)}  # {p.task or name}: {p.summary[:160]}\n")
    if not found:
        out.write(f"# job {name} waits for the operator (no open problem recorded)\n")


def wait_for_job(layout: Any, name: str, timeout: float | None = None, on_event: Any = None) -> int:
    """Block until the job ends or needs the operator; woken by the event log, never polling it.

    on_event(ev) is called with each new event (the demo prints them)."""
    import time

    from pilothouse.core.state.events import EventTailer
    from pilothouse.core.supervisor import control as supervisor_ctl
    from pilothouse.providers.errors import UserError

    deadline = None if timeout is None else time.monotonic() + timeout
    tailer = EventTailer(layout.events)
    if on_event is None:
        tailer = EventTailer(layout.events, start_at_end=True)
    from watchfiles import watch

    layout.runtime.mkdir(parents=True, exist_ok=True)
    last_alive = time.monotonic()
    outcome, reason = job_outcome(layout, name)
    settled_at: float | None = None
    closing = {"accepted": "job.accepted", "waiting": "job.blocked", "failed": "job.failed"}
    for _changes in _watch(watch, layout):
        seen = set()
        for ev in tailer.read_new():
            seen.add((ev.get("type"), ev.get("job")))
            if on_event is not None:
                on_event(ev)
        outcome, reason = job_outcome(layout, name)
        now = time.monotonic()
        if outcome is not None:
            # the store commits just before the closing event is appended: let a follower print it
            if on_event is None or (closing[outcome], name) in seen or (settled_at and now - settled_at > 1.0):
                break
            settled_at = settled_at or now
            continue
        if now - last_alive > 2.0:
            last_alive = now
            if supervisor_ctl.status(layout) is None:
                raise UserError(f"job {name} is not finished and no supervisor is running: "
                                "`pilothouse job start` (then wait again)")
        if deadline is not None and now > deadline:
            print(f"job {name}: still running after {timeout:g}s (timed out, exit {EXIT_TIMEOUT})",
                  file=sys.stderr)
            return EXIT_TIMEOUT
    if outcome == "accepted":
        print(f"job {name} accepted: {reason}")
        return EXIT_ACCEPTED
    if outcome == "waiting":
        print(f"job {name} waits for the operator: {reason}")
        print_waiting(layout, name)
        return EXIT_WAITING
    print(f"job {name} failed: {reason}")
    return EXIT_FAILED


def _watch(watch: Any, layout: Any) -> Any:
    yield set()  # look once before the first change
    yield from watch(layout.runtime, debounce=20, step=10, rust_timeout=1000, yield_on_timeout=True)
