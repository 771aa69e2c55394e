"""CLI: the supervisor.

    pilothouse run --watch [--max-workers N] [--once]      the supervisor in the foreground
    pilothouse integrate                                   merge the approved tasks by hand
    pilothouse job start [NAME] [--max-workers N]          the supervisor, detached
    pilothouse job stop
    pilothouse job wait NAME [--timeout S]                 (core/commands/job_end.py: how a job ends)
    pilothouse job plan-ready NAME                         use the graph from `task define`
"""

from __future__ import annotations

import sys

from pilothouse.core.commands._out import seconds, worker_count

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

def _add_repo(p: Any) -> None:
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")


def _layout(args: Any) -> Any:
    from pilothouse.core.records.layout import find_repo

    return find_repo(getattr(args, "repo", None))


def register(sub: Any) -> None:
    # `run --watch` shares the `run` parser with dispatch's human run (see add_watch_options)
    i = sub.add_parser("integrate", help="merge the approved tasks into the integration branch now",
                       description="Process the approved merge queue by hand (no supervisor may be running).")
    _add_repo(i)
    i.set_defaults(func=_integrate)


def add_watch_options(p: Any) -> None:
    """The supervisor's options on `pilothouse run` (which, without them, runs one task for a human)."""
    g = p.add_argument_group("supervisor (run --watch)")
    g.add_argument("--watch", action="store_true", help="run this repository's supervisor in the foreground: "
                   "it plans, builds, gates, reviews and integrates every open job")
    g.add_argument("--once", action="store_true", help="run the supervisor until no job can progress without "
                   "the operator, then exit (implies --watch)")
    g.add_argument("--max-workers", type=worker_count, metavar="N", help="with --watch: parallel workers "
                   "(default: project.yaml max_workers)")
    g.add_argument("--quiet", action="store_true", help="with --watch: print nothing (the events are still "
                   "in pilothouse live)")
    if not any(a.dest == "repo" for a in p._actions):
        _add_repo(p)


def run_supervisor(args: Any) -> int:
    import threading

    from pilothouse.core.records.project import load_project
    from pilothouse.core.state.events import EventTailer
    from pilothouse.core.supervisor import control as supervisor_ctl
    from pilothouse.core.supervisor.loop import run_foreground
    from pilothouse.providers.errors import UserError

    layout = _layout(args)
    project = load_project(layout)  # a repository never set up is refused before anything is written to it
    running = supervisor_ctl.status(layout)
    if running is not None:
        raise UserError(f"a supervisor is already running for {layout.root} (pid {running['pid']}): "
                        "pilothouse live --follow shows what it does; pilothouse job stop stops it")
    supervisor_ctl.refuse_unconfined(project)
    done = threading.Event()
    printer = None
    if not getattr(args, "quiet", False):
        print(f"supervisor for {layout.root} in the foreground (Ctrl-C stops it; running workers go on); "
              f"log: {layout.supervisor_log}", flush=True)
        layout.events.parent.mkdir(parents=True, exist_ok=True)
        # positioned before the supervisor starts, so its first events are printed too
        tailer = EventTailer(layout.events, start_at_end=True)
        printer = threading.Thread(target=_print_events, args=(layout, tailer, done), name="events", daemon=True)
        printer.start()
    try:
        return run_foreground(layout, getattr(args, "max_workers", None), once=getattr(args, "once", False))
    finally:
        done.set()
        if printer is not None:
            printer.join(timeout=2)


def _print_events(layout: Any, tailer: Any, done: Any) -> None:
    """What the supervisor does, as `pilothouse live --follow` would print it, until it stops."""
    from pilothouse.core.commands.live import format_event
    from pilothouse.core.state.events import follow

    try:
        for ev in follow(layout.events, stop_event=done, tailer=tailer):
            print(format_event(ev), flush=True)
    except (BrokenPipeError, ValueError):
        pass  # stdout closed (a pipe into head): the supervisor itself goes on


def register_job_subcommands(job_sub: Any) -> None:
    s = job_sub.add_parser("start", help="start the supervisor for this repository, detached")
    s.add_argument("name", nargs="?", help="a job to check exists first")
    s.add_argument("--max-workers", type=worker_count, metavar="N",
                   help="parallel workers (default: project.yaml max_workers); applies when it starts")
    _add_repo(s)
    s.set_defaults(func=_start)
    st = job_sub.add_parser("stop", help="stop the supervisor (running workers keep running)")
    _add_repo(st)
    st.set_defaults(func=_stop)
    w = job_sub.add_parser("wait", help="block until the job is accepted (0), waits for you (3) or failed (1)",
                           description="Exit codes: 0 accepted, 3 waiting for the operator (each open problem "
                                       "is printed with its replies), 1 failed, 2 usage error or no supervisor "
                                       "running, 124 timed out (--timeout; the job keeps running).")
    w.add_argument("name")
    w.add_argument("--timeout", type=seconds, metavar="S", help="give up after S seconds (exit 124)")
    _add_repo(w)
    w.set_defaults(func=_wait)
    pr = job_sub.add_parser("plan-ready", help="the job's graph is defined (task define): plan no further")
    pr.add_argument("name")
    _add_repo(pr)
    pr.set_defaults(func=_plan_ready)


def _integrate(args: Any) -> int:
    from pilothouse.core.supervisor import control as supervisor_ctl
    from pilothouse.core.supervisor.loop import run_foreground
    from pilothouse.providers.errors import UserError

    layout = _layout(args)
    if supervisor_ctl.status(layout) is not None:
        raise UserError("the supervisor is running and integrates by itself: `pilothouse job stop` first")
    queue = _merge_queue(layout)
    if not queue:
        print("nothing approved is waiting to merge")
        return 0
    rc = run_foreground(layout, once=True, integrate_only=True)
    for job, task, state, reason in _tasks(layout, queue):
        print(f"{job}/{task}: {state} — {reason}")
    return rc


def _merge_queue(layout: Any) -> list[tuple[str, str]]:
    from pilothouse.core.state import store

    if not layout.state_db.exists():
        return []
    conn = store.connect(layout.state_db, readonly=True)
    try:
        return [(r["job"], r["task"]) for r in
                conn.execute("SELECT job, task FROM tasks WHERE state IN ('approved', 'merging')")]
    finally:
        conn.close()


def _tasks(layout: Any, keys: list[tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    from pilothouse.core.state import store

    conn = store.connect(layout.state_db, readonly=True)
    try:
        out = []
        for job, task in keys:
            r = conn.execute("SELECT state, reason FROM tasks WHERE job=? AND task=?", (job, task)).fetchone()
            out.append((job, task, r["state"], r["reason"] or ""))
        return out
    finally:
        conn.close()


def _start(args: Any) -> int:
    from pilothouse.core.records.project import load_project
    from pilothouse.core.supervisor import control as supervisor_ctl

    layout = _layout(args)
    project = load_project(layout)  # a broken project.yaml is reported here, not in the log
    if supervisor_ctl.status(layout) is None:
        from pilothouse.core.records.check import require_fit

        require_fit(layout)  # what `pilothouse check` finds stops the start, before anything launches
    if args.name:
        from pilothouse.core.records.jobs import load_job

        load_job(layout, args.name)
    before = supervisor_ctl.status(layout)
    if before is None:
        supervisor_ctl.refuse_unconfined(project)
    pid = supervisor_ctl.start(layout, args.max_workers)
    word = "already running" if before else "started"
    print(f"supervisor {word} (pid {pid}); log: {layout.supervisor_log}")
    from pilothouse.core.notify.watch import start_with_supervisor

    start_with_supervisor()
    if not before:
        # the same count the supervisor announces (its supervisor.started event may come just after)
        from pilothouse.core.supervisor.health import skipped_lines

        skipped, first, _ = skipped_lines(layout)
        if skipped:
            print(f"{layout.events}: {skipped} line(s) that are not events are skipped by every "
                  f"reader (first: {first})", file=sys.stderr)
    if before and args.max_workers is not None:
        running = _running_max_workers(layout, pid)
        if running != args.max_workers:
            now = f" (it runs {running})" if running is not None else ""
            # rc stays 0: scripts call `job start` to make sure a supervisor runs
            print(f"--max-workers {args.max_workers} not applied: the running supervisor keeps its own{now}; "
                  f"`pilothouse job stop` first, then `pilothouse job start --max-workers {args.max_workers}`",
                  file=sys.stderr)
    return 0


def _announced(layout: Any, pid: int) -> dict[str, Any]:
    """The data of the supervisor.started event the supervisor `pid` appended ({} if none)."""
    from pilothouse.core.state.events import EventTailer

    found: dict[str, Any] = {}
    for ev in EventTailer(layout.events).iter_new():
        data = ev.get("data") or {}
        if ev["type"] == "supervisor.started" and data.get("pid") == pid:
            found = data
    return found


def _running_max_workers(layout: Any, pid: int) -> int | None:
    """The worker count the supervisor `pid` announced in its supervisor.started event, or None."""
    found = _announced(layout, pid).get("max_workers")
    return found if type(found) is int else None


def _stop(args: Any) -> int:
    from pilothouse.core.supervisor import control as supervisor_ctl

    layout = _layout(args)
    if supervisor_ctl.stop(layout):
        print("supervisor stopped; running workers keep running and are adopted by the next one")
    else:
        print("no supervisor is running for this repository")
    return 0


def _plan_ready(args: Any) -> int:
    layout = _layout(args)
    revision, count = plan_ready(layout, args.name)
    print(f"job {args.name} revision {revision}: {count} tasks defined; the supervisor takes them as the plan")
    return 0


def plan_ready(layout: Any, name: str) -> tuple[int, int]:
    """Mark the job's defined tasks as its plan: (the revision planned, how many tasks)."""
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.taskgraph import load_tasks
    from pilothouse.core.state import store
    from pilothouse.core.supervisor.planning import mark_plan_ready
    from pilothouse.providers.errors import UserError

    job = load_job(layout, name)
    refuse_if_planned(layout, name, job.revision)
    tasks = load_tasks(layout, name)
    if not tasks:
        raise UserError(f".ai/tasks.yaml has no tasks for job {name}: "
                        f"`pilothouse task define --file F` first (entries with job_id: {name})")
    conn = store.connect(layout.state_db)
    try:
        mark_plan_ready(conn, name, job.revision)
    finally:
        conn.close()
    return job.revision, len(tasks)


def refuse_if_planned(layout: Any, name: str, revision: int) -> None:
    """Refuse new definitions for a revision the supervisor has already planned.

    The supervisor plans a revision once (supervisor_plan.step: planned_revision >= revision is
    final), so tasks defined afterwards would sit in .ai/tasks.yaml and never run."""
    import sqlite3

    from pilothouse.core.state import store
    from pilothouse.providers.errors import UserError

    if not layout.state_db.exists():
        return
    try:
        conn = store.connect(layout.state_db, readonly=True)
        try:
            row = conn.execute("SELECT planned_revision FROM jobs_state WHERE job=?", (name,)).fetchone()
            # the assigner's plan replaces the job's definitions when it lands: a graph defined
            # meanwhile would be dropped without a word
            planning = conn.execute("SELECT 1 FROM runs WHERE job=? AND role='assigner' AND state='running'",
                                    (name,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return
    if row is not None and row["planned_revision"] and row["planned_revision"] >= revision:
        raise UserError(f"job {name} is already planned (revision {revision}): to change the plan, correct the "
                        f"request with pilothouse job update {name} --request-file F (the assigner re-plans) "
                        "or answer a problem with plan")
    if planning is not None:
        raise UserError(f"job {name} is being planned by the assigner now: its plan would replace these tasks; "
                        f"wait for it (pilothouse job status {name}), then correct it with pilothouse job update "
                        f"{name} --request-file F")


def _wait(args: Any) -> int:
    from pilothouse.core.commands.job_end import wait_for_job
    from pilothouse.core.records.jobs import load_job

    layout = _layout(args)
    load_job(layout, args.name)
    return wait_for_job(layout, args.name, args.timeout)
