"""The MCP server: which tools each profile gets (front.py serves it on stdio)."""

from __future__ import annotations

from pilothouse.core.mcp.base import INSTRUCTIONS, Host, PilotServer


def build(repo: str | None = None, worker_job: str | None = None, context: str | None = None) -> PilotServer:
    """The host profile (every tool), or with `worker_job` the worker's read-only profile of that job
    (`context`: the folder holding the copy of its records, see Host.context)."""
    from pilothouse import __version__

    if worker_job is not None:
        from pilothouse.core.mcp import worker

        server = PilotServer("pilothouse-worker", version=__version__, instructions=worker.INSTRUCTIONS,
                             log_level="WARNING")
        worker.register(server, Host(repo, context=context), worker_job)
        return server
    from pilothouse.core.mcp import events, jobs, planning, problems

    server = PilotServer("pilothouse", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    host = Host(repo, who=_who())
    for group in (jobs, planning, problems, events):
        group.register(server, host)
    return server


def _who() -> str:
    import getpass

    try:
        return f"{getpass.getuser()}@mcp"
    except Exception:  # no passwd entry in some containers
        return "operator@mcp"

