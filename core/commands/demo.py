"""CLI: `pilothouse demo [--follow] [--dir PATH] [--scenario NAME] [--list]`.

Runs the main job end to end on the simulator in a scratch repository (printed first). With a
terminal it opens the cockpit; `--follow` prints the live events instead. Exit codes, as for
`job wait`: 0 the job was accepted, 3 it waits for the operator (each open problem's code and
replies are printed, one per line), 1 it failed.
"""

from __future__ import annotations

import sys

from pilothouse.core.commands._out import worker_count

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the main job on the simulator in a scratch repository",
                       description="Make a scratch Python project with tests, create a job from a bundled "
                       "request and run plan -> build -> gate -> review -> integrate on the sim provider. "
                       "Exit 0 accepted, 3 waiting for the operator, 1 failed.")
    p.add_argument("--follow", action="store_true", help="print the live events instead of opening the cockpit")
    p.add_argument("--dir", metavar="PATH", help="put the scratch repository here (default: a new temp dir)")
    p.add_argument("--scenario", default="demo", metavar="NAME", help="bundled sim scenario (default: demo)")
    p.add_argument("--list", action="store_true", help="name the bundled scenarios that run a job, and exit "
                   "(`pilothouse sim list` also shows the dispatch-only ones)")
    p.add_argument("--max-workers", type=worker_count, metavar="N", help="parallel workers (default 3)")
    p.set_defaults(func=_demo)


def _demo(args: Any) -> int:
    import tempfile
    from pathlib import Path

    from pilothouse.core import demo

    if args.list:
        for name, description in demo.list_scenarios():
            print(f"{name:<20} {description}")
        return 0
    demo.check_scenario(args.scenario)
    if args.dir:
        demo.check_dest(Path(args.dir))
    dest = Path(args.dir).expanduser() if args.dir else Path(tempfile.mkdtemp(prefix="pilothouse-demo-"))
    unconfined = demo.unconfined_line()
    layout = demo.prepare(dest, args.scenario, args.max_workers, unconfined=unconfined is not None)
    # only now: a refusal above must not name a directory that holds no repository
    print(f"scratch repository: {layout.root}", flush=True)
    if unconfined is not None:
        print(unconfined, flush=True)
    print(f"job {demo.JOB} created (scenario {args.scenario}); starting the supervisor", flush=True)
    from pilothouse.core.supervisor import control as supervisor_ctl

    supervisor_ctl.start(layout)
    try:
        opened = not args.follow and demo.tty() and _cockpit(layout)
    except BaseException:
        _stop(layout)  # a cockpit that could not open must not leave the job's supervisor behind
        raise
    if opened:
        from pilothouse.core.commands.job_end import job_outcome

        outcome, _ = job_outcome(layout, demo.JOB)
        return _finish(layout, outcome)
    return _follow(layout)


def _cockpit(layout: Any) -> bool:
    """Open the cockpit on the scratch repo; False when there is none to open."""
    import importlib.util

    from pilothouse.core.commands.view import open_cockpit

    if importlib.util.find_spec("textual") is None:  # looked up, not imported: core stays Textual-free
        return False
    open_cockpit(str(layout.root))
    return True


def _follow(layout: Any) -> int:
    from pilothouse.core import demo
    from pilothouse.core.commands.job_end import EXIT_WAITING, wait_for_job
    from pilothouse.core.commands.live import format_event

    def show(ev: dict[str, Any]) -> None:
        if ev.get("type") in ("supervisor.heartbeat",):
            return
        sys.stdout.write(format_event(ev) + "\n")
        sys.stdout.flush()

    try:
        rc = wait_for_job(layout, demo.JOB, on_event=show)
    except KeyboardInterrupt:
        print(f"\nthe job goes on in the background: pilothouse job wait {demo.JOB} --repo {layout.root}"
              f" (or stop it: pilothouse job stop --repo {layout.root})", file=sys.stderr)
        raise
    if rc != EXIT_WAITING:
        _stop(layout)
    _summary(layout)
    if rc == EXIT_WAITING:
        print(f"the supervisor keeps running to apply your replies (answer in {layout.root}); "
              f"when done: pilothouse job stop --repo {layout.root}")
    return rc


def _finish(layout: Any, outcome: str | None) -> int:
    from pilothouse.core import demo
    from pilothouse.core.commands.job_end import (
        EXIT_ACCEPTED,
        EXIT_FAILED,
        EXIT_WAITING,
        print_waiting,
    )

    if outcome == "waiting":
        print_waiting(layout, demo.JOB)
        return EXIT_WAITING
    if outcome is None:
        print(f"job {demo.JOB} keeps running in the background: pilothouse job wait {demo.JOB} --repo {layout.root}")
        return EXIT_ACCEPTED
    _summary(layout)
    return EXIT_ACCEPTED if outcome == "accepted" else EXIT_FAILED


def _stop(layout: Any) -> None:
    from pilothouse.core.supervisor import control as supervisor_ctl

    supervisor_ctl.stop(layout)


def _summary(layout: Any) -> None:
    from pilothouse.core import demo

    merges = demo.integration_summary(layout)
    if merges:
        print("integration branch merges:")
        for line in merges:
            print(f"  {line}")
    print(f"scratch repository: {layout.root}  (pilothouse live --repo {layout.root})")
