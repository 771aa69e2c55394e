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
        await wait_for_input(pilot, "ValueModal")
        box = app.screen.query_one("#value")
        assert (box.value, box.cursor_position) == ("100000", 6)  # the cursor after the value, to change it
        await pilot.press("backspace", *"x lots", "enter")  # Enter saves
        error = app.screen.query_one("#value-error")
        await wait_for(pilot, lambda: str(error.render()))
        refused = str(error.render())
        assert "budgets.job_tokens" in refused and "\n" not in refused
        assert cockpit_repo.project_yaml.read_text() == before  # untouched
        assert type(app.screen).__name__ == "ValueModal" and box.value == "10000x lots"  # what was typed stays
        await pilot.press("ctrl+u", *"250000", "enter")
        await wait_for(pilot, lambda: str(table.get_cell("budgets.job_tokens", "value")) == "250000")
        assert cockpit_repo.project_yaml.read_text() == before.replace("100000", "250000")  # comments kept
        assert "applies at once" in next(iter(app._notifications)).message
