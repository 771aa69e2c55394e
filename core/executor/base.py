"""The executor seam: what the supervisor asks of whatever runs its dispatches.

An executor is told of a launch already recorded (its runs row and spec, core/dispatch/runs.py);
it starts the run, and wakes the supervisor's Waker when the run's verdict is on disk
(`post("verdict")`) and when the run is over (its pidfd, or `Waker.ended`). Nothing polls.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

from pilothouse.core.dispatch import runs
from pilothouse.core.dispatch.runs import Launch
from pilothouse.core.executor.host import Host

if TYPE_CHECKING:
    from pilothouse.core.records.layout import RepoLayout

LOCAL, RAY = "local", "ray"


class Executor(Protocol):
    name: str

    def launch(self, sup: Host, launch: Launch, event_extra: dict[str, Any] | None = None) -> None:
        """Start a recorded launch and watch it (the run.started event is its to write)."""

    def adopt(self, sup: Host, row: sqlite3.Row, launch: Launch | None) -> bool:
        """After a restart: watch the run again if it is still going; False when it is not."""

    def collect(self, sup: Host, run_id: str, provider: str) -> dict[str, Any] | None:
        """The run's verdict, once it is on disk here; None when it never wrote one."""

    def forget(self, sup: Host, run_id: str) -> None:
        """The run is collected: stop watching it, reap what is left of it."""

    def live(self) -> set[str]:
        """Runs this executor watches (besides the supervisor's own children and adopted pids)."""

    def cancel(self, layout: RepoLayout, run_id: str, grace: float) -> bool:
        """Interrupt the run, kill it after `grace` seconds; False when it was not running."""


def executor_name(project: Any, role: str) -> str:
    """Where a new launch of `role` runs: the cluster when the project says so for that role."""
    if getattr(project, "executor", LOCAL) == RAY and role in project.ray.roles:
        return RAY
    return LOCAL


class Executors:
    """The supervisor's executors, each made when first needed (the Ray one imports ray)."""

    def __init__(self) -> None:
        from pilothouse.core.executor.local import LocalExecutor

        self._made: dict[str, Executor] = {LOCAL: LocalExecutor()}

    def get(self, name: str, layout: RepoLayout) -> Executor:
        if name not in self._made:
            if name != RAY:
                raise ValueError(f"no executor {name!r}")
            from pilothouse.core.executor.cluster import RayExecutor

            self._made[name] = RayExecutor(layout)
        return self._made[name]

    def of(self, launch: Launch | None, layout: RepoLayout) -> Executor:
        return self.get(launch.executor if launch is not None else LOCAL, layout)

    def live(self) -> set[str]:
        return {r for e in self._made.values() for r in e.live()}

    def warm(self, sup: Host) -> None:
        """As the supervisor starts: a project on a cluster joins it ahead of the first run."""
        try:
            project = sup.project
        except Exception:  # noqa: BLE001 - a broken project.yaml: the loop says so itself
            return
        if getattr(project, "executor", LOCAL) == RAY:
            cluster: Any = self.get(RAY, sup.layout)
            cluster.warm(sup)

    def close(self) -> None:
        """The supervisor stops: what an executor keeps besides the runs goes (the cluster's spares)."""
        made: Any = self._made.get(RAY)
        if made is not None:
            made.close()


def cancel_run(layout: RepoLayout, run_id: str, grace: float) -> bool:
    """Interrupt one recorded run wherever it runs (`job abort`, `job cancel`)."""
    launch = runs.read_spec(layout, run_id)
    return Executors().of(launch, layout).cancel(layout, run_id, grace)
