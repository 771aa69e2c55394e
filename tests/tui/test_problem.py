"""The problem dialog (enter on a problem), through the real app against a real state.db."""

from __future__ import annotations

import pytest
from test_events_panel import screen_text

pytestmark = pytest.mark.anyio


async def test_dialog_shows_its_reply_keys_at_80x24(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops.replies import REPLY_HELP
    from textual.widgets import Footer
    from textual.widgets._footer import FooterKey

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ProblemDialog")
        await pilot.pause()
        keys = app.screen.query_one("#dialog-keys")
        footer = app.screen.query_one(Footer)
        assert keys.region.bottom <= footer.region.y  # above the fold, not under it
        text = screen_text(app)
        for reply in ("retry", "skip", "hint", "accept"):
            assert REPLY_HELP[reply][:30] in text  # each key with a line on what it does
        shown = {k.description for k in footer.query(FooterKey)}
        assert "retry" in shown and "New job" not in shown  # the dialog's keys, not the dashboard's
