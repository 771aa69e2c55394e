"""The keyed tables as the operator sees them: drawn by the real app against real state."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


def _cell_style(table, row_text: str, cell_text: str):
    """The rich style the table draws `cell_text` with, on the screen line that shows `row_text`."""
    for y in range(table.size.height):
        segments = list(table.render_line(y))
        if row_text in "".join(s.text for s in segments):
            for seg in segments:
                if cell_text in seg.text:
                    return seg.style
    raise AssertionError(f"{row_text!r} / {cell_text!r} not drawn")


@pytest.mark.parametrize("task,state,word", [("calendar-ui", "stopped", "bold red"),
                                             ("calendar-sync", "waiting", "yellow")])
async def test_cursor_row_keeps_state_colours(cockpit_repo, make_app, wait_for, task, state, word) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.dashboard.tasks
        await pilot.press("3")
        table.select_key(task)
        await pilot.pause()
        assert table.current_key == task and app.focused is table
        style = _cell_style(table, task, state)
        assert style.bgcolor is not None  # the cursor is drawn on this row
        # the theme's colour for the state (tui/palette.py), not the cursor's foreground
        assert style.color is not None and style.color == app.console.get_style(word).color


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)])
async def test_every_panel_fits_its_columns(cockpit_repo, make_app, size) -> None:
    """Fixed widths that add up to more than the panel cut the last column (the Providers header
    read 'che' at 120 columns)."""
    from pilothouse.tui.widgets.table import KeyedTable

    app = make_app(cockpit_repo)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for table in app.dashboard.query(KeyedTable):
            room = table.outer_size.width - table.styles.gutter.width
            needed = sum(w + 2 * table.cell_padding for _, w in table._layout) + 1
            assert needed <= room, f"{table.id} at {size}: {needed} columns in {room}"
