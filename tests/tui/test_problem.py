"""The problem dialog (enter on a problem), through the real app against a real state.db."""

from __future__ import annotations

import pytest
from cockpit_support import shown
from test_cockpit import replies
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


async def test_problem_dialog_answered_elsewhere_drops_its_keys(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops import answering
    from pilothouse.tui.screens.problem import ProblemDialog

    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProblemDialog))
        dialog = app.screen
        assert shown(app, "dialog.retry")
        answering.act(cockpit_repo, "KTRWMB", "accept", who="someone@cli")
        await wait_for(pilot, lambda: not shown(app, "dialog.retry"))
        assert dialog.answered == "accept"
        assert "answered (accept) elsewhere" in str(dialog.query_one("#dialog-keys").render())
        assert not shown(app, "dialog.retry")
        await pilot.press("r")
        await pilot.pause(0.3)
        assert len(replies(cockpit_repo)) == 1 and not app._notifications


async def test_dialog_lists_findings_one_per_line(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops import problems

    rejected = problems.open_problem(
        cockpit_repo, "first-draft", "calendar-store", "review_rejected", "The reviewer rejected it 3 times.",
        {"findings": [{"severity": "major", "file_line": "src/store.py:14", "summary": "the file handle leaks",
                       "suggested_fix": "use with"}]})
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        app.dashboard.problems.select_key(rejected.code)
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ProblemDialog")
        await pilot.pause()
        text = screen_text(app)
        assert "• [major] src/store.py:14 the file handle leaks (fix: use with)" in text
        assert '"severity"' not in text and "[{" not in text
