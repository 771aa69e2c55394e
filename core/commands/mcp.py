"""CLI group 'mcp': the MCP server a host agent (Claude Code, Codex, OpenCode) starts on stdio.

    pilothouse mcp [--repo PATH]                 the host's tools: jobs, planning, problems, events
    pilothouse mcp --worker --job NAME           a worker's read-only view of its job
                   [--context DIR]               ... read from the copy dispatch put in its sandbox
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("mcp", help="the MCP server for a host agent (stdio; `install host` registers it)",
                       description="Speaks MCP on stdin/stdout: the host's model creates, starts, waits for and "
                                   "answers jobs through typed tools. --worker serves a worker the job's "
                                   "request, decisions and attachments, and nothing that writes.")
    p.add_argument("--worker", action="store_true", help="the read-only worker profile (needs --job)")
    p.add_argument("--job", metavar="NAME", help="with --worker: the job the worker works for")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.add_argument("--context", metavar="DIR", help="with --worker: the copy of the job's records a run's "
                   "sandbox holds (dispatch writes it; the repository itself is hidden from workers)")
    import argparse

    # dispatch's own: makes the worker profile's handshake record (core/dispatch/handshake.py)
    p.add_argument("--record", metavar="PROFILE", help=argparse.SUPPRESS)
    p.set_defaults(func=_serve)


def _serve(args: Any) -> int:
    from pilothouse.providers.errors import UserError

    if args.worker and not args.job:
        raise UserError("--worker needs --job NAME: a worker sees only the job it works for")
    if args.job and not args.worker:
        raise UserError("--job goes with --worker; the host's server serves every job")
    if args.context and not args.worker:
        raise UserError("--context goes with --worker: the host's server reads the repository itself")
    if args.context and args.repo:
        raise UserError("pass --context or --repo, not both: a worker's server reads one of them")
    from pilothouse.core.mcp import front

    if args.record:
        return front.record(args.record)
    return front.serve(args.repo, args.job if args.worker else None, args.context)
