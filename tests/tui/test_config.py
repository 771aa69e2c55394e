"""The operator's cockpit file (tui/config.py): the theme kept, through the real app."""

from __future__ import annotations

import pytest
from test_keymap import _write

pytestmark = pytest.mark.anyio


async def test_a_chosen_theme_is_kept_with_the_files_comments_and_used_next_time(cockpit_repo, make_app,
                                                                                 wait_for) -> None:
    path = _write("# my cockpit\nkeys:\n  app.help: f1  # the help key\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: "theme:" in path.read_text())
    assert path.read_text() == "# my cockpit\nkeys:\n  app.help: f1  # the help key\ntheme: textual-light\n"
    again = make_app(cockpit_repo)
    async with again.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert again.theme == "textual-light" and again.config_problems == []


async def test_a_theme_is_kept_in_a_file_not_there_yet(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.tui.config import config_file

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.theme = "nord"  # as the command palette's theme picker sets it
        await wait_for(pilot, lambda: config_file().exists())
    assert config_file().read_text().splitlines()[-1] == "theme: nord"


@pytest.mark.parametrize(("start", "then"), [("nord", "textual-light"), ("solarized-light", "textual-dark"),
                                             ("textual-dark", "textual-light"), ("textual-light", "textual-dark")])
async def test_ctrl_t_from_any_theme_goes_to_the_other_side(cockpit_repo, make_app, start, then) -> None:
    """From a third theme, ctrl+t goes to the light one if it is dark and the dark one if it is light
    (from nord it went to textual-dark first)."""
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.theme = start
        await pilot.press("ctrl+t")
        assert app.theme == then
