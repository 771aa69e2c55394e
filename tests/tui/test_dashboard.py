"""The dashboard screen: panels, focus, the filter and following the event log, through the real app."""

from __future__ import annotations

import pytest
from pilothouse.core.state.events import EventLog

pytestmark = pytest.mark.anyio


async def test_filter_escape_restores_layout_and_follow(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        dash = app.dashboard
        for keys in (("5", "slash", "escape"), ("3", "slash", "escape")):
            await pilot.press(*keys)
            await pilot.pause()
            await pilot.pause()
            assert not dash.show_vertical_scrollbar
            assert [p.outer_size.width for p in (dash.jobs, dash.tasks, dash.problems, dash.events)] == [80] * 4
        events = dash.events
        EventLog(cockpit_repo.events).append("merge.finished", job="first-draft", task="calendar-api",
                                             data={"sha": "feedbeef"})
        await wait_for(pilot, lambda: "feedbeef" in events.lines[-1])
        await pilot.pause()
        assert events.follow and events.scroll_y == events.max_scroll_y
