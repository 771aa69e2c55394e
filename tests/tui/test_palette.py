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


def _lab(c: Color) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a colour: how far apart two colours look is the distance of these."""
    def linear(v: int) -> float:
        x = v / 255
        return x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    r, g, b = linear(c.r), linear(c.g), linear(c.b)
    x = f((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047)
    y = f(0.2126 * r + 0.7152 * g + 0.0722 * b)
    z = f((0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    return 116 * y - 16, 500 * (x - y), 200 * (y - z)


async def test_the_timelines_building_and_merging_bars_are_two_colours_on_every_theme(demo_repo, make_app,
                                                                                      wait_for) -> None:
    """Building (█, blue) and merging (▀, cyan) were both the theme's $primary: on textual-dark two bars of
    one colour side by side. Measured from the chart as drawn: two hues far apart (ΔE), each readable."""
    import math

    from pilothouse.tui.palette import contrast
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = make_app(demo_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.selected_job == "demo")
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.loaded)
        chart = app.screen.chart
        measured = {}
        for theme in sorted(app.available_themes):
            app.theme = theme
            await pilot.pause()
            bars: dict[str, set[tuple[Color, Color]]] = {"█": set(), "▀": set()}
            for y in range(chart.size.height):
                for seg in chart.render_line(y):
                    glyph = seg.text[:1]
                    if glyph in bars and set(seg.text) == {glyph} and seg.style and not seg.style.reverse:
                        bars[glyph].add((seg.style.color, seg.style.bgcolor))
            assert all(len(drawn) == 1 for drawn in bars.values()), (theme, bars)  # one colour each, both drawn
            (building, ground), (merging, _) = bars["█"].pop(), bars["▀"].pop()
            if building.triplet is None:  # ansi-dark/-light: the terminal's own blue and cyan
                assert theme.startswith("ansi") and building != merging, theme
                continue
            building, merging, ground = (Color.from_rich_color(c) for c in (building, merging, ground))
            measured[theme] = math.dist(_lab(building), _lab(merging))
            assert measured[theme] >= 15, f"{theme}: building {building.hex}, merging {merging.hex}"
            assert min(contrast(building, ground), contrast(merging, ground)) >= 3.0, theme
    assert measured["textual-dark"] >= 40 and measured["textual-light"] >= 40, measured
