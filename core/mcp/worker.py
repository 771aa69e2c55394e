"""The worker's profile (`pilothouse mcp --worker --job NAME`): the job's request, decisions and
attachments, read-only. Only these tools are registered in this server, so no call, name or
argument reaches anything that writes: the host tools do not exist in the worker's process."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Image
from pilothouse.core.mcp.base import Host, PilotServer
from pilothouse.providers.errors import UserError
from pydantic import Field

INSTRUCTIONS = ("Read-only context of the job you work for: job_request (what the operator asked, and the "
                "acceptance), job_decisions (what the operator decided), job_attachment (a screenshot).")
WORKER_TOOLS = ("job_request", "job_decisions", "job_attachment")


def register(server: PilotServer, host: Host, job: str) -> None:
    from pilothouse.core.records.jobs import validate_name

    validate_name(job)

    def load() -> tuple[Any, Any]:
        from pilothouse.core.records.jobs import load_job

        layout = host.layout()
        return layout, load_job(layout, job)

    @server.tool(description="The job's request (latest revision, and the earlier ones) and its acceptance.")
    def job_request() -> dict[str, Any]:
        _layout, j = load()
        return {"job": j.name, "revision": j.revision, "request": j.request, "acceptance": j.acceptance,
                "earlier": [{"revision": r.revision, "request": r.request} for r in j.revisions[:-1]],
                "attachments": [{"index": i, "name": a.name, "mime": a.mime} for i, a in enumerate(j.attachments)]}

    @server.tool(description="The operator's decisions for this job, oldest first: respect them.")
    def job_decisions() -> list[str]:
        return [d.text for d in load()[1].decisions]

    @server.tool(description="One of the job's screenshots, by its index in job_request's attachments.")
    def job_attachment(index: Annotated[int, Field(ge=0)]) -> Image:
        layout, j = load()
        if index >= len(j.attachments):
            raise UserError(f"job {job} has {len(j.attachments)} attachment(s): pass an index below that")
        a = j.attachments[index]
        from pilothouse.core.records.jobs import read_attachment

        return Image(data=read_attachment(layout, job, a.path), format=a.mime.split("/", 1)[1])
