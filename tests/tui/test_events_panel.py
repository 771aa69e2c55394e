"""The live event log panel, driven through the real app against a real events.jsonl."""

from __future__ import annotations

import html
import re

import pytest
from pilothouse.core.state.events import EventLog

pytestmark = pytest.mark.anyio


def screen_text(app) -> str:
    """What the terminal shows, as plain text (the SVG screenshot without its markup)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_paused_notice_is_drawn_at_every_size(cockpit_repo, make_app, wait_for, size) -> None:
    app = make_app(cockpit_repo, live=True)
    log = EventLog(cockpit_repo.events)
    for n in range(30):
        log.append("run.usage", job="first-draft", task="calendar-api", data={"tokens": {"input": n}})
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        events = app.dashboard.events
        await pilot.press("5", "k", "k")
        assert not events.follow
        log.append("merge.finished", job="first-draft", task="calendar-store", data={"sha": "abc"})
        log.append("merge.finished", job="first-draft", task="calendar-api", data={"sha": "def"})
        await wait_for(pilot, lambda: events.new_count == 2)
        await pilot.press("3")  # the log loses focus and shrinks: the notice must still show
        await pilot.pause()
        assert "paused · 2 new" in screen_text(app)
        await pilot.press("5", "f")
        await pilot.pause()
        assert "paused" not in screen_text(app)


async def test_an_events_colour_is_drawn_over_the_panels_own(cockpit_repo, make_app, wait_for) -> None:
    """problem.opened is red and merge.finished green on every theme: the panel's foreground is the
    base each line is drawn on, not a style laid over the line's own colours."""
    app = make_app(cockpit_repo, live=True)
    log = EventLog(cockpit_repo.events)
    log.append("merge.finished", job="first-draft", task="calendar-store", data={"sha": "abc"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        events = app.dashboard.events
        await wait_for(pilot, lambda: any("merge.finished" in line for line in events.lines))
        row = next(i for i, line in enumerate(events.lines) if "merge.finished" in line)
        events.scroll_to(y=row, animate=False)
        await pilot.pause()
        strip = events.render_line(row - int(events.scroll_offset.y))
        kind = next(s for s in strip if "merge.finished" in s.text)
        plain = next(s for s in strip if s.text.strip() and s.text.strip()[0].isdigit())  # the clock: dim
        assert kind.style is not None and kind.style.color is not None
        assert kind.style.color != events.rich_style.color and kind.style.color != plain.style.color
