"""Planning tools: a host that plans by hand defines the task graph and marks it ready; start and
stop the repository's supervisor."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pilothouse.core.mcp.base import Host, PilotServer, check_text
from pydantic import Field

TASKS_HELP = ("task entries as `pilothouse task define` takes them: each with id, title, description, kind, "
              "expected_paths {read, write}, acceptance, depends_on; job_id defaults to `job`")


def register(server: PilotServer, host: Host) -> None:
    @server.tool(description="Define (or with replace, redefine) a job's task graph by hand; then "
                 "job_plan_ready. " + TASKS_HELP)
    def task_define(job: str, tasks: Annotated[list[dict[str, Any]], Field(description=TASKS_HELP)],
                    replace: bool = False) -> list[dict[str, Any]]:
        from pilothouse.core.commands.tasks import define_tasks
        from pilothouse.core.records.project import load_project
        from pilothouse.core.records.taskgraph import MAX_TASKS
        from pilothouse.providers.errors import UserError

        if len(tasks) > MAX_TASKS:  # the limit the tasks.yaml reader holds to, said before any work
            raise UserError(f"{len(tasks)} tasks, more than the limit of {MAX_TASKS} a tasks.yaml holds: define "
                            "fewer (split the work into several jobs)")
        check_text(json.dumps(tasks), "tasks")
        layout = host.layout()
        defined, _jobs = define_tasks(layout, load_project(layout), tasks, job, replace, "tasks", "mcp")
        return [t.model_dump(mode="json") for t in defined]

    @server.tool(description="The job's tasks from task_define are its plan: the supervisor plans no further.")
    def job_plan_ready(name: str) -> dict[str, Any]:
        from pilothouse.core.commands.supervise import plan_ready

        revision, count = plan_ready(host.layout(), name)
        return {"job": name, "revision": revision, "tasks": count}

    @server.tool(description="Start the repository's supervisor (detached; a running one is kept). It plans, "
                 "builds, gates, reviews and merges every open job.")
    def job_start(name: str | None = None,
                  max_workers: Annotated[int | None, Field(gt=0, le=64)] = None) -> dict[str, Any]:
        from pilothouse.core.records.jobs import load_job
        from pilothouse.core.records.project import load_project
        from pilothouse.core.supervisor import control as supervisor_ctl

        layout = host.layout()
        load_project(layout)
        if name:
            load_job(layout, name)
        before = supervisor_ctl.status(layout)
        pid = supervisor_ctl.start(layout, max_workers)
        return {"pid": pid, "already_running": before is not None}

    @server.tool(description="Stop the supervisor; running workers go on and the next supervisor adopts them.")
    def job_stop() -> dict[str, Any]:
        from pilothouse.core.supervisor import control as supervisor_ctl

        return {"stopped": bool(supervisor_ctl.stop(host.layout()))}
