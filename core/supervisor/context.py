"""What the supervisor's steps read about the repository and the job: the task definitions (cached
on tasks.yaml's mtime), the integration head new worktrees start from, and whether a job may launch.

The bottom of the supervisor package: flow, scheduling, review and planning all ask it; it asks
none of them, so the steps depend on it one way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor


def integration_good_head(sup: Supervisor, job: str) -> str | None:
    """The head of the job's own line to start its new worktrees from: never a merge whose gate
    has not passed, never another job's work (each job integrates on its own line)."""
    from pilothouse.core.git.integration import integration_head, pending_file

    try:
        pending = json.loads(pending_file(sup.layout, job).read_text())
        return str(pending["previous_sha"])
    except (OSError, ValueError, KeyError, TypeError):
        return integration_head(sup.layout, sup.project, job)


def job_scenario(sup: Supervisor, job: str) -> str | None:
    """The simulator scenario scripting the job's runs: its own (`job create --sim-scenario`),
    else the project's `sim_scenario`."""
    from pilothouse.core.records.jobs import load_job
    from pilothouse.providers.errors import UserError

    try:
        own = load_job(sup.layout, job).sim_scenario
    except UserError:  # the record went away (job delete): the project's setting, if any
        own = None
    return own or sup.project.sim_scenario


def policy_of(sup: Supervisor, job: str) -> tuple[Any, tuple[str, str | None] | None]:
    """(the project whose model policy chooses the job's workers, the provider used where it names
    none). A job scripted by its own scenario runs every role on the simulator, whatever the
    project's policy says: its replies only make sense there."""
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.project import ModelPolicy
    from pilothouse.providers.errors import UserError

    try:
        own = load_job(sup.layout, job).sim_scenario
    except UserError:
        own = None
    if own:
        return sup.project.model_copy(update={"model_policy": ModelPolicy()}), ("sim", None)
    return sup.project, sup.default_provider


def task_defs(sup: Supervisor) -> dict[tuple[str, str], Any]:
    from pilothouse.core.records.taskgraph import load_tasks

    try:
        mtime = sup.layout.tasks_yaml.stat().st_mtime_ns
    except FileNotFoundError:
        mtime = None
    cache = getattr(sup, "_defs_cache", None)
    if cache is None or cache[0] != mtime:
        cache = (mtime, {(t.job_id, t.id): t for t in load_tasks(sup.layout)})
        sup._defs_cache = cache  # type: ignore[attr-defined]
    return cache[1]


def launch_hold(sup: Supervisor, job: str, *, setup: bool = True) -> str | None:
    """Why nothing new may launch for the job now (budget, a shared setup failure), or None."""
    from pilothouse.core.stops import holds

    return holds.launch_hold(sup.layout, job, sup.project.budgets.job_tokens, conn=sup.conn, log=sup.events,
                             setup=setup)
