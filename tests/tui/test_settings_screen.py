"""The settings screen (`C`), through the real app: every choice listed, one edited in place and
checked by core, a value that does not fit refused in one line with the file untouched."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


async def test_settings_lists_every_choice_and_edits_one_keeping_comments(cockpit_repo, make_app, wait_for,
                                                                          wait_for_input) -> None:
    cockpit_repo.project_yaml.write_text("# calendar project\n" + cockpit_repo.project_yaml.read_text()
                                         + "budgets:\n  job_tokens: 100000  # raised for the ui work\n")
    before = cockpit_repo.project_yaml.read_text()
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("C")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "SettingsScreen")
        table = app.screen.query_one("#settings-table")
        keys = [k.value for k in table.rows]
        assert {"gates.fast", "workflow.review", "budgets.job_tokens", "max_workers", "confinement",
                "network", "model_policy.roles.reviewer"} <= set(keys)
        assert str(table.get_cell("budgets.job_tokens", "applies")) == "at once"
        assert str(table.get_cell("max_workers", "applies")) == "next start"
        table.select_key("budgets.job_tokens")
        await pilot.press("enter")
        await wait_for_input(pilot, "WordsModal")
        await pilot.press("ctrl+a", "ctrl+k", *"lots", "ctrl+s")
        await wait_for(pilot, lambda: app._notifications)
        refused = next(iter(app._notifications)).message
        assert "budgets.job_tokens" in refused and "\n" not in refused
        assert cockpit_repo.project_yaml.read_text() == before  # untouched
        app.clear_notifications()
        await wait_for(pilot, lambda: type(app.screen).__name__ == "SettingsScreen")
        await pilot.press("enter")
        await wait_for_input(pilot, "WordsModal")
        await pilot.press("ctrl+a", "ctrl+k", *"250000", "ctrl+s")
        await wait_for(pilot, lambda: str(table.get_cell("budgets.job_tokens", "value")) == "250000")
        assert cockpit_repo.project_yaml.read_text() == before.replace("100000", "250000")  # comments kept
        assert "applies at once" in next(iter(app._notifications)).message
