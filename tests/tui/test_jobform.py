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


async def test_the_correction_form_names_no_field_to_tab_to_and_the_operators_keys(cockpit_repo, make_app,
                                                                                    wait_for_input) -> None:
    """The correction has one field: "tab next field" led nowhere. Its keys are the operator's (cockpit.yaml)."""
    from pilothouse.core.records import jobs
    from pilothouse.tui.config import config_file

    config_file().parent.mkdir(parents=True, exist_ok=True)
    config_file().write_text("keys:\n  form.save: ctrl+w\n  form.cancel: f3\n")
    jobs.create_job(cockpit_repo, "first-draft", "A calendar: a JSON store, an HTTP API and a month view.")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await wait_for_input(pilot, "JobForm")
        assert str(app.screen.query_one(".dialog").border_subtitle) == "^w save · f3 cancel"
        await pilot.press("f3")
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        assert str(app.screen.query_one(".dialog").border_subtitle) == "tab next field · ^w save · f3 cancel"
