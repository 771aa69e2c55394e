"""The new-job form (`n`), through the real app."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


async def test_new_job_form_shows_how_to_save_at_80x24(cockpit_repo, make_app, wait_for_input) -> None:
    from textual.widgets import Footer
    from textual.widgets._footer import FooterKey

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        await pilot.pause()
        footer = app.screen.query_one(Footer)
        assert footer.region.bottom == 24
        assert "ctrl+s" in {k.key for k in footer.query(FooterKey)}


async def test_job_form_validates_in_place_and_asks_before_discarding(cockpit_repo, make_app, wait_for,
                                                                      wait_for_input) -> None:
    from pilothouse.core.records import jobs

    jobs.create_job(cockpit_repo, "week-view", "Show a week view.")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        form = app.screen
        await pilot.press(*"week-view", "tab", *"A second week view.", "ctrl+s")
        await wait_for(pilot, lambda: app.screen is not form or getattr(form, "error", ""))
        assert app.screen is form  # still open, nothing lost
        assert "week-view" in form.error and "\n" not in form.error
        assert form.query_one("#request").text == "A second week view."
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
        await pilot.press("enter")  # the safe default: keep the form
        await pilot.pause()
        assert app.screen is form
        await pilot.press("escape", "y")
        await pilot.pause()
        assert app.screen is app.dashboard
        assert jobs.load_job(cockpit_repo, "week-view").request == "Show a week view."
        # an empty form closes at once
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
