"""`pilothouse replay JOB` on a terminal: the cockpit opened straight on the job's timeline in replay
mode (tui/screens/timeline_replay.py), at `at` (None: the job's first event), playing at `speed`
once space is pressed; q quits the cockpit (the replay is what was asked for), esc goes back to the
dashboard, as from any timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.tui.app import CockpitApp


def replay_app(layout: RepoLayout, job: str, at: datetime | None, speed: float, **kwargs: Any) -> CockpitApp:
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = CockpitApp(layout, **kwargs)

    def opener() -> TimelineScreen:
        return TimelineScreen(job, replay=True, at=at, speed=speed, from_command_line=True)

    app.first_screen = opener
    return app


def run(layout: RepoLayout, job: str, at: datetime | None, speed: float) -> int:
    replay_app(layout, job, at, speed).run()
    return 0
