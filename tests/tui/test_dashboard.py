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


async def test_a_panel_jump_repaints_the_panels_it_changes_not_the_screen(cockpit_repo, make_app, wait_for) -> None:
    """Textual repaints the whole screen when its focus moves (most of a jump's frame); the dashboard
    hands the terminal the panels the focus left and entered, not the ones it did not touch."""
    from textual._compositor import ChopsUpdate

    app = make_app(cockpit_repo)
    sent: list[object] = []
    display = app._display

    def seen(screen, update):  # every frame handed to the terminal
        if update is not None:
            sent.append(update)
        return display(screen, update)

    app._display = seen
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        dash = app.dashboard
        await pilot.press("3")
        for key, panel in (("4", dash.problems), ("3", dash.tasks), ("4", dash.problems)):
            await pilot.pause()
            sent.clear()
            await pilot.press(key)
            await wait_for(pilot, lambda p=panel: app.focused is p)
            await pilot.pause()
            assert sent and all(isinstance(u, ChopsUpdate) for u in sent)  # no whole-screen frame
            jobs = dash.jobs.region
            assert not [(y, x1, x2) for u in sent for y, x1, x2 in u.spans
                        if jobs.y <= y < jobs.bottom and x1 < jobs.right and x2 > jobs.x]  # untouched, not redrawn
