"""Job tools: create, correct, decide, list, status, and a bounded wait that reports each event as
progress and, when the job waits for the operator, each open problem with its code and replies."""

from __future__ import annotations

import time
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pilothouse.core.mcp.base import Host, PilotServer, check_text
from pilothouse.core.mcp.untrusted import clean, fence
from pilothouse.providers.errors import UserError
from pydantic import Field

MAX_WAIT_S = 600.0  # a host's tool call must come back: a longer wait is another call
DEFAULT_WAIT_S = 50.0  # under the 60 s a host gives a tool call by default (Codex)
Name = Annotated[str, Field(description="the job's name: lowercase letters, digits and '-'")]


def _job_dict(job: Any) -> dict[str, Any]:
    return {"job": job.name, "revision": job.revision, "request": job.request, "acceptance": job.acceptance,
            "decisions": [d.text for d in job.decisions],
            "attachments": [{"index": i, "name": a.name, "mime": a.mime, "size": a.size}
                            for i, a in enumerate(job.attachments)]}


def register(server: PilotServer, host: Host) -> None:
    @server.tool(description="Create a job: one outcome the operator can accept, in product terms. "
                 "Attachments are screenshots (PNG, JPEG, GIF, WebP) by path, relative to the repository.")
    def job_create(name: Name, request: str, acceptance: str | None = None,
                   attachments: list[str] | None = None) -> dict[str, Any]:
        from pilothouse.core.records import jobs
        from pilothouse.core.records.project import load_project

        check_text(request, "request")
        check_text(acceptance, "acceptance")
        layout = host.layout()
        load_project(layout)  # a repository never set up is refused before a record is written
        job = jobs.create_job(layout, name, request, acceptance=acceptance,
                              attachments=_paths(layout, attachments))
        return _job_dict(job)

    @server.tool(description="Correct a job: the correction becomes a new revision (earlier ones are kept) "
                 "and the supervisor re-plans before launching more.")
    def job_update(name: Name, request: str, acceptance: str | None = None,
                   attachments: list[str] | None = None) -> dict[str, Any]:
        from pilothouse.core.records import jobs

        check_text(request, "correction")
        check_text(acceptance, "acceptance")
        layout = host.layout()
        return _job_dict(jobs.update_job(layout, name, request, attachments=_paths(layout, attachments),
                                         acceptance=acceptance))

    @server.tool(description="Record a decision the planner must respect (e.g. 'use SQLite').")
    def job_decide(name: Name, text: str) -> dict[str, Any]:
        from pilothouse.core.records import jobs

        check_text(text, "decision")
        return _job_dict(jobs.decide(host.layout(), name, text))

    @server.tool(description="Every job of the repository with its state and task counts.")
    def job_list() -> list[dict[str, Any]]:
        from pilothouse.core.commands.jobs import list_rows

        return fence(list_rows(host.layout()))

    @server.tool(description="A job's state, its tasks, its open problems (code, replies) and the supervisor.")
    def job_status(name: Name) -> dict[str, Any]:
        from pilothouse.core.commands.jobs import status_rows

        return fence(status_rows(host.layout(), name)[0])

    @server.tool(description="Wait (at most timeout_s seconds) until the job is accepted, failed, or waits for "
                 "the operator; outcome 'running' means call again. When waiting, answer each problem with "
                 "problem_act. Each event is sent as a progress notification.")
    async def job_wait(name: Name, ctx: Context,
                       timeout_s: Annotated[float, Field(gt=0, le=MAX_WAIT_S)] = DEFAULT_WAIT_S) -> dict[str, Any]:
        from pilothouse.core.records.jobs import load_job

        layout = host.layout()
        load_job(layout, name)
        return fence(await wait(layout, name, timeout_s, ctx))


def _paths(layout: Any, attachments: list[str] | None) -> list[Any]:
    for p in attachments or []:
        if not p.strip():
            raise UserError("attachments: an empty path: give each screenshot's path")
    return [layout.root / p for p in attachments or []]


async def wait(layout: Any, name: str, timeout_s: float, ctx: Any) -> dict[str, Any]:
    """Woken by the runtime directory's changes (never polling the store); at least once a second
    it checks the deadline and, every two, that a supervisor is still there to move the job."""
    from pilothouse.core.commands.job_end import job_outcome
    from pilothouse.core.commands.live import format_event
    from pilothouse.core.state.events import EventTailer
    from pilothouse.core.stops import problems
    from pilothouse.core.supervisor import control as supervisor_ctl
    from watchfiles import awatch

    layout.runtime.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    tailer = EventTailer(layout.events, start_at_end=True)
    seen = 0
    last_alive = 0.0
    outcome, reason = job_outcome(layout, name)
    if outcome is None:
        async for _changes in awatch(layout.runtime, debounce=20, step=10, rust_timeout=1000,
                                     yield_on_timeout=True):
            for ev in tailer.read_new():
                if ev.get("job") == name and ev.get("type") not in ("supervisor.heartbeat", "run.usage"):
                    seen += 1
                    # a progress message is one string: the event's worker text is cleaned, not fenced
                    await ctx.report_progress(seen, None, clean(format_event(ev), 500))
            outcome, reason = job_outcome(layout, name)
            now = time.monotonic()
            if outcome is not None or now > deadline:
                break
            if now - last_alive > 2.0:
                last_alive = now
                if supervisor_ctl.status(layout) is None:
                    raise UserError(f"job {name} is not finished and no supervisor is running: call job_start, "
                                    "then job_wait again")
    found = problems.list_problems(layout, True, job=name) if outcome == "waiting" else []
    from pilothouse.core.commands.jobs import job_states

    states, _tasks = job_states(layout)
    return {"job": name, "outcome": outcome or "running", "state": (states.get(name) or {}).get("state"),
            "reason": reason, "timed_out": outcome is None,
            "problems": [{"code": p.code, "task": p.task, "kind": p.kind, "summary": p.summary,
                          "replies": p.replies} for p in found if p.state == "open" and not p.pending]}
