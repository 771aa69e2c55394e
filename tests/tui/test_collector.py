"""The garbage collector's full passes wait until the operator stops typing (tui/collector.py)."""

from __future__ import annotations

import gc
import time

import pytest

pytestmark = pytest.mark.anyio


async def test_no_full_collection_while_the_operator_types_and_one_once_they_stop(cockpit_repo, make_app,
                                                                                   wait_for) -> None:
    from pilothouse.tui.collector import IDLE_S

    full: list[float] = []  # when each full pass started

    def watch(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(time.monotonic())

    thresholds = gc.get_threshold()
    gc.callbacks.append(watch)
    try:
        app = make_app(cockpit_repo)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await wait_for(pilot, lambda: gc.get_freeze_count() > 0)  # settled after the first frame
            full.clear()
            for _ in range(8):  # enough allocation for Python's defaults to run several full passes
                await pilot.press("1", "2", "3", "4", "5", "3", "enter")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
                last_key = time.monotonic()  # taken before the key is sent: the idle wait starts after it
                await pilot.press("escape")
                await wait_for(pilot, lambda: app.screen is app.screen_stack[0])
            assert full == []  # none fell on a keystroke
            await wait_for(pilot, lambda: full, timeout=10)  # the operator paused: the pass comes now
            # a lower bound only (a busy machine makes it later, never earlier): it waited for the pause
            assert full[0] - last_key >= IDLE_S - 0.1
        # the app is over: its objects are collectable again, the thresholds Python's
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    finally:
        gc.callbacks.remove(watch)
