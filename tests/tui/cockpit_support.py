"""The cockpit fixture's fixed clock and run ids, for conftest.py and the tests that need them by name
(`from cockpit_support import RUN_API`): a module of its own, since `conftest` is a name two folders share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

NOW = datetime(2026, 11, 29, 7, 30, 0, tzinfo=UTC)
T0 = datetime(2026, 11, 29, 7, 0, 0, tzinfo=UTC)


def ts(minutes: float) -> str:
    t = T0 + timedelta(minutes=minutes)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def frozen_clock() -> datetime:
    return NOW


RUN_API = "20261129T071200Z-a11ce001"
RUN_UI = "20261129T071500Z-b0b00002"
RUN_STORE = "20261129T070200Z-c0ffee03"
RUN_REVIEW = "20261129T070800Z-d00d0004"


def shown(app: object, binding_id: str) -> bool:
    """Whether the footer offers the binding (check_action said yes)."""
    return any(b.binding.id == binding_id and b.enabled
               for b in app.screen.active_bindings.values())  # type: ignore[attr-defined]


def bury(layout: object, megabytes: int = 10) -> None:
    """Another task's busy worker appends `megabytes` of activity events after everything in the log."""
    import json

    from pilothouse.core.state.event_index import EventLookup

    events = layout.events  # type: ignore[attr-defined]
    with EventLookup(events) as lookup:
        seq = max(e["seq"] for e in lookup.select("first-draft"))
    with open(events, "a") as fh:
        while fh.tell() < megabytes << 20:
            seq += 1
            fh.write(json.dumps({"seq": seq, "ts": ts(29.9), "type": "run.activity", "job": "first-draft",
                                 "task": "calendar-api", "run": RUN_API, "data": {"tool": f"edit src/api.py {seq}" * 3}},
                                separators=(",", ":")) + "\n")


async def open_timeline(pilot: Any, wait_for: Any) -> Any:
    """The demo job's timeline, opened from the dashboard with T."""
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = pilot.app
    await wait_for(pilot, lambda: app.dashboard.selected_job == "demo")
    await pilot.press("T")
    await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.loaded)
    return app.screen
