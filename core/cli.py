"""The `pilothouse` / `ph` command line.

Kept thin and cheap to import: each command group lives in `core/commands/<group>.py`, whose
module imports nothing heavy at top level; handlers import pydantic, GitPython, Textual and
friends inside the function that needs them, so `pilothouse --help` pays for none of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Order is the order of `pilothouse --help`. Each module defines register(subparsers).
GROUPS = (
    "init", "jobs", "tasks", "supervise", "problems", "models", "live", "view", "demo",
    "dispatch", "providers", "keys", "status", "install", "sim", "confine", "maintain",
)


def build_parser() -> argparse.ArgumentParser:
    from pilothouse import __version__

    parser = argparse.ArgumentParser(
        prog="pilothouse",
        description="Dispatch bounded tasks to isolated LLM workers and supervise whole jobs. "
        "With no command, opens the cockpit.",
    )
    parser.add_argument("--version", action="version", version=f"pilothouse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        importlib.import_module(f"pilothouse.core.commands.{group}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pilothouse.providers.errors import UserError

    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        if args.command is None:
            # bare `pilothouse` opens the cockpit
            args = parser.parse_args(["view", *(argv or sys.argv[1:])])
            func = args.func
        else:
            parser.parse_args([args.command, "--help"])
            return 2
    try:
        rc = func(args)
    except UserError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pilothouse: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # a closed pipe (`| head`) is not an error; silence the flush at exit too
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
