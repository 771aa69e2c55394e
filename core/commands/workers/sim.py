"""CLI group 'sim': run the simulated model server standalone, list its scenarios.

Stdlib only at module top; the server (and pydantic/yaml for scenarios) load in the handlers.
"""

from __future__ import annotations

import sys

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("sim", help="the simulated model server (loopback; scripted replies, no real model)")
    group = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")

    serve = group.add_parser("serve", help="serve a scenario on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--scenario", help="bundled scenario name or path to a .yaml file")
    serve.add_argument("--list", action="store_true", help="list the scenarios instead of serving")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="only 127.0.0.1 is allowed")
    serve.add_argument("--api-key-file", help="require the key in this file (Bearer or x-api-key); else any key")
    serve.add_argument("--served-log", help="append one JSON line per response served (usage, status)")
    serve.set_defaults(func=cmd_serve)

    lst = group.add_parser("list", help="list the scenarios (bundled and yours)")
    add_json_flag(lst)
    lst.set_defaults(func=cmd_list)


def cmd_list(args: Any) -> int:
    from pilothouse.providers.sim.scenario import list_scenarios

    rows = list_scenarios()
    if args.json:
        emit_json([{"name": n, "description": d} for n, d in rows])
    else:
        print_table(["SCENARIO", "DESCRIPTION"], rows)
    return 0


def cmd_serve(args: Any) -> int:
    import signal
    import threading

    from pilothouse.providers.errors import UserError
    from pilothouse.providers.sim.server import LOOPBACK, SimServer

    if args.list:
        args.json = False
        return cmd_list(args)
    if not args.scenario:
        raise UserError("sim serve: --scenario NAME is required (see `pilothouse sim list`)")
    if args.host not in LOOPBACK:
        raise UserError(f"sim serve: --host {args.host} refused; the simulator listens on 127.0.0.1 only")
    if not 0 <= args.port <= 65535:
        raise UserError(f"sim serve: --port {args.port} is not a port (0-65535; 0 picks a free one)")
    api_key = None
    if args.api_key_file:
        try:
            with open(args.api_key_file, encoding="utf-8") as fh:
                api_key = fh.read().strip()
        except OSError as exc:
            raise UserError(f"sim serve: --api-key-file {args.api_key_file}: {exc.strerror}") from None
        if not api_key:
            raise UserError(f"sim serve: --api-key-file {args.api_key_file} is empty")
    sim = SimServer(args.scenario, port=args.port, api_key=api_key, served_log=args.served_log)
    url = sim.start()
    stop = threading.Event()
    # SIGINT by hand too: a server started from a script in the background inherits SIGINT ignored,
    # and Python then never turns it into KeyboardInterrupt (the busy suite's `sim serve` never stopped)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"pilothouse sim (simulated model server, loopback only) listening on {url} — "
          f"scenario {sim.scenario.name}", flush=True)
    print(f"  endpoints: {url}/v1/chat/completions  {url}/v1/responses  {url}/v1/messages  {url}/v1/models",
          flush=True)
    try:
        while not stop.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    print("pilothouse sim: stopped", file=sys.stderr, flush=True)
    return 0
