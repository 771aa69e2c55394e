"""The help screen (`?`), through the real app."""

from __future__ import annotations

import pytest
from test_events_panel import screen_text

pytestmark = pytest.mark.anyio


async def test_help_scrolls_with_j_and_lists_keys_not_ids(cockpit_repo, make_app, wait_for) -> None:
    from textual.containers import VerticalScroll

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.pause()
        box = app.screen.query_one(VerticalScroll)
        assert box.max_scroll_y > 0
        assert "nav.down" not in screen_text(app) and "problem.retry" not in screen_text(app)
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert box.scroll_y == 3
        await pilot.press("k")
        await pilot.pause()
        assert box.scroll_y == 2
        box.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        text = screen_text(app)
        assert "Run detail" in text and "previous run" in text and "answer the task's problem" in text
        assert "Fix in place" in text and "a shell in the task's worktree" in text and "exclamation" not in text
