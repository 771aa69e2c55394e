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
