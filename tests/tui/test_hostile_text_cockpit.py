"""Attack 5 in the cockpit: a worker's activity and events carry terminal escapes (the tmux pane
title, a cleared screen, an 8-bit CSI, a DCS query). The real app draws them as inert text: what
it would write to the terminal holds no escape but Textual's own colours and cursor moves."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from cockpit_support import RUN_API, ts
from rich.segment import Segment
from textual.color import Color

pytestmark = pytest.mark.anyio

HOSTILE = ("title\x1b]0;PWNED-TITLE\x07 clear\x1b[2J\x1b[H csi8\x9b2J dcs\x1bP$q\"p\x1b\\ "
           "tmux\x1bkPWNED-PANE\x1b\\ bidi\u202eexe\u202c osc8\x9d2;PWNED-8BIT\x9c end")
# what Textual itself writes for a frame: colours and styles (SGR), cursor positions, links (OSC 8)
_TEXTUALS_OWN = re.compile(r"\x1b\[[0-9;:]*[mH]|\x1b\]8;[^\x1b\x07]*(?:\x1b\\|\x07)")


def frame(app) -> str:
    """The bytes the app would write to the terminal for its whole screen now, Textual's own
    sequences taken out: what is left came from the widgets' text."""
    update = app.screen._compositor.render_full_update()
    return _TEXTUALS_OWN.sub("", update.render_segments(app.console))


def obeyed(text: str) -> list[str]:
    return sorted({repr(c) for c in text if (unicodedata.category(c) == "Cc" and c not in "\n\t")
                   or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"})


def plant(cockpit_repo) -> None:
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers.paths import logs_dir

    with open(logs_dir() / "sim" / f"{RUN_API}.jsonl", "a") as fh:
        for n, line in enumerate([{"kind": "text", "text": HOSTILE},
                                  {"kind": "tool", "name": "bash" + HOSTILE, "status": "ok", "brief": HOSTILE},
                                  {"kind": "reasoning", "text": HOSTILE},
                                  {"kind": "error", "error_class": "tool", "message": HOSTILE},
                                  {"kind": "text", "text": "and the last line"}]):
            fh.write(json.dumps({"ts": ts(30 + n), **line}) + "\n")
    EventLog(cockpit_repo.events).append(
        "run.activity", job="calendar", task="calendar-api", run=RUN_API, data={"tool": HOSTILE})


async def test_run_detail_draws_a_workers_escapes_inert(cockpit_repo, make_app, wait_for) -> None:
    from textual.widgets import RichLog

    plant(cockpit_repo)
    app = make_app(cockpit_repo)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        shown = frame(app)
        assert obeyed(shown) == [] and "PWNED" not in shown, repr(shown)
        await pilot.press("3", "j", "enter")  # calendar-api, the running task: its run's activity
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        log = app.screen.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: "and the last line" in "\n".join(line.text for line in log.lines))
        await pilot.pause()
        shown = frame(app)
        assert "csi8" in shown  # the words are there, only their escapes are not
        assert obeyed(shown) == [], repr(shown)
        assert "PWNED" not in shown, repr(shown)


def test_the_screen_filter_drops_what_a_panel_forgot_to_clean() -> None:
    from pilothouse.tui.inert_screen import InertLines

    out = InertLines().apply([Segment("a\x1b]0;x\x07b\x9b2J"), Segment("ok"), Segment("", None, [(1,)])],
                             Color(0, 0, 0))
    assert [s.text for s in out] == ["a]0;xb2J", "ok", ""]
    assert out[2].control == [(1,)]  # Textual's own control segments pass as they are
