"""Event tools (the log since a seq, `why`) and the resources: a job's record and its event stream."""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from pilothouse.core.mcp.base import Host, PilotServer
from pilothouse.core.mcp.untrusted import fence
from pilothouse.providers.errors import UserError
from pydantic import Field

MAX_EVENTS = 500


def _all(layout: Any) -> list[dict[str, Any]]:
    from pilothouse.core.state.events import EventTailer

    return EventTailer(layout.events).read_new()


def register(server: PilotServer, host: Host) -> None:
    @server.tool(description="Events after seq `since` (0: from the start), oldest first, at most `limit`; "
                 "filtered by job and/or task. Pass the last seq you saw to read on.")
    def events_since(since: Annotated[int, Field(ge=0)] = 0, job: str | None = None, task: str | None = None,
                     limit: Annotated[int, Field(gt=0, le=MAX_EVENTS)] = 100) -> dict[str, Any]:
        from pilothouse.core.state.event_index import EventLookup

        layout = host.layout()
        with EventLookup(layout.events) as lookup:
            # a job's events come through the log's index; only an unfiltered look reads it all
            everything = lookup.select(job, task) if job else _all(layout)
            picked = [e for e in everything if int(e.get("seq") or 0) > since
                      and (task is None or e.get("task") == task)]
            if not picked and (job or task):
                _known(layout, job, task, lookup)
        # from the same reading: an event appended meanwhile is in the next call, never skipped
        last = max((int(e.get("seq") or 0) for e in everything), default=since)
        return {"events": fence(picked[:limit]), "more": len(picked) > limit,
                "last_seq": int(picked[limit - 1]["seq"]) if len(picked) > limit else last}

    @server.tool(description="Why a task launched, waits, stopped or failed to merge, or (given a job's name) "
                 "the job's planning, final gate and stops: the chain of events and what it waits for now.")
    def why(name: Annotated[str, Field(description="a task id, or a job's name")],
            job: str | None = None) -> dict[str, Any]:
        from pilothouse.core.queries.why import why_report

        return fence(why_report(host.layout(), name, job, listing="job_status lists the jobs and their tasks"))

    @server.resource("pilothouse://jobs/{name}", name="job", mime_type="application/json",
                     description="A job's record: its request, revisions, acceptance, decisions, attachments.")
    def job_record(name: str) -> str:
        from pilothouse.core.records.jobs import load_job

        try:
            return load_job(host.layout(), name).model_dump_json(indent=1)
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from None

    @server.resource("pilothouse://jobs/{name}/events", name="job-events", mime_type="application/x-ndjson",
                     description="A job's events, one JSON object per line, oldest first.")
    def job_events(name: str) -> str:
        from pilothouse.core.records.jobs import load_job

        layout = host.layout()
        try:
            load_job(layout, name)
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        from pilothouse.core.state.event_index import events_of

        return "".join(json.dumps(fence(e), separators=(",", ":"), default=str) + "\n"
                       for e in events_of(layout.events, name))


def _known(layout: Any, job: str | None, task: str | None, lookup: Any) -> None:
    """An unknown job or task is a mistake the model should hear of; a known one may have no new events."""
    from pilothouse.core.records.jobs import validate_name
    from pilothouse.core.records.taskgraph import load_tasks

    if job and not (layout.jobs_dir / f"{validate_name(job)}.json").is_file() and not lookup.has_job(job):
        raise UserError(f"no job named {job!r}: job_list shows the jobs")
    if task and not lookup.jobs_of(task) and not any(t.id == task for t in load_tasks(layout, job)):
        raise UserError(f"no task {task!r}" + (f" in job {job}" if job else "") + ": job_status lists the tasks")
