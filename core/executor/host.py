"""What an executor uses of the supervisor, and the settings a launch is started with."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

from pilothouse.core.dispatch import runs

if TYPE_CHECKING:
    from pilothouse.core.records.layout import RepoLayout


class Host(Protocol):
    """What an executor uses of the supervisor (core/supervisor/loop.py)."""

    layout: RepoLayout
    conn: sqlite3.Connection
    waker: Any
    events: Any
    log: Any
    children: dict[str, Any]
    adopted: set[str]
    tails: dict[str, runs.RunTail]
    worktree_lock: Any

    @property
    def project(self) -> Any: ...

    def start_again(self, why: str) -> None:
        """Leave the loop soon and start this process again (the runs go on and are adopted)."""


def settings(sup: Any) -> Any:
    """The project's settings for a launch being started: the run is already recorded, so a
    project.yaml broken just now (an editor's half-written save) must not stop it from being
    spawned: the last good settings then (None if there never were any)."""
    try:
        return sup.project
    except Exception:  # noqa: BLE001 - any failure to read the settings
        return getattr(sup, "_project", None)
