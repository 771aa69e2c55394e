"""State colours under every theme: drawn by the real app, measured from the rendered segments."""

from __future__ import annotations

import pytest
from textual.color import Color

pytestmark = pytest.mark.anyio

COLOURED = ("done", "running", "stopped", "waiting", "accepted")


def test_contrast_is_wcags_ratio() -> None:
    from pilothouse.tui.palette import contrast

    assert contrast(Color(0, 0, 0), Color(255, 255, 255)) == pytest.approx(21.0)
    assert contrast(Color(118, 118, 118), Color(255, 255, 255)) == pytest.approx(4.54, abs=0.01)
    assert contrast(Color(9, 9, 9), Color(9, 9, 9)) == 1.0


def _state_cells(table, words):
    """(word, style, on the cursor row) of every segment of `table` that draws one of `words`."""
    cursor_y = table.cursor_row + 1  # one header line above the rows
    out = []
    for y in range(table.size.height):
        for seg in table.render_line(y):
            word = seg.text.strip()
            if word in words or (word and set(word) == {"█"}):
                out.append((word, seg.style, y == cursor_y - table.scroll_offset.y))
    return out


async def test_state_colours_are_readable_on_every_theme_and_on_the_cursor_row(cockpit_repo, make_app) -> None:
    from pilothouse.tui.palette import contrast

    app = make_app(cockpit_repo)
    measured = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        themes = sorted(app.available_themes)
        assert len(themes) >= 20
        for theme in themes:
            app.theme = theme
            await pilot.press("3")
            tasks = app.dashboard.tasks
            for key in list(tasks.tasks):
                tasks.select_key(key)
                await pilot.pause()
                cells = [*_state_cells(tasks, COLOURED), *_state_cells(app.dashboard.jobs, COLOURED),
                         *_state_cells(app.dashboard.providers, ())]
                assert {"stopped", "waiting", "running", "accepted"} <= {w for w, _, _ in cells}
                assert any(on_cursor for _, _, on_cursor in cells)
                for word, style, on_cursor in cells:
                    assert style.color is not None and style.bgcolor is not None, (theme, word)
                    if style.color.triplet is None:  # ansi-dark/-light: the terminal's own palette, unknown here
                        assert theme.startswith("ansi"), (theme, word)
                        continue
                    ratio = contrast(Color.from_rich_color(style.color), Color.from_rich_color(style.bgcolor))
                    measured.append((theme, word, on_cursor, ratio))
                    assert ratio >= 3.0, f"{theme}: {word} {'on the cursor row ' if on_cursor else ''}{ratio:.2f}"
    assert len({t for t, *_ in measured}) >= len(themes) - 2
    assert {w for _, w, on_cursor, _ in measured if on_cursor} >= {"stopped", "waiting", "running", "done"}


@pytest.mark.parametrize(("words", "screen"), [("Settings", "SettingsScreen"), ("Usage", "UsageScreen"),
                                               ("Gate log", "GateLog"), ("Diff", "DiffScreen"),
                                               ("Ship", "ConfirmModal")])
async def test_the_palette_reaches_settings_usage_ship_diff_and_the_gate_log(cockpit_repo, ui_worktree, make_app,
                                                                             wait_for, words, screen) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        if words == "Ship":
            await pilot.press("1", "k")  # hello-world: accepted
        else:
            await pilot.press("3", "j", "j")  # calendar-ui: its worktree, its failed gate
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette")
        await pilot.press(*words)
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == screen)
