"""Keys that arrive in one write (a paste, one SSH packet) are applied in order, each with the focus and
cursor the key before it left: posted to the app all at once here, as Textual's driver posts the keys of
one read, and sent by tmux as one string in a real terminal."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from test_cockpit import replies
from tmux_support import Tmux, need_tmux

pytestmark = pytest.mark.anyio


def burst(app, keys: str) -> None:
    """Every key of `keys` in the app's queue before the first is handled (no await between them)."""
    from textual import events
    from textual.keys import _character_to_key

    for char in keys:
        app.post_message(events.Key(_character_to_key(char), char))


async def _tasks_on_calendar_ui(app, pilot, wait_for) -> None:
    # the Problems panel's cursor is on calendar-api's weakened gate; then the focus goes to Tasks,
    # on calendar-ui (stopped on its own problems): one key at a time, settled
    await pilot.press("4")
    app.dashboard.problems.select_key("WKAPZX")
    await pilot.press("3", "j", "j")
    await wait_for(pilot, lambda: app.dashboard.current_task.task == "calendar-ui")


async def test_a_panel_jump_then_hint_asks_for_the_problem_under_the_new_panels_cursor(
        weakened_problems, make_app, wait_for) -> None:
    from pilothouse.tui.screens.modals import WordsModal

    app = make_app(weakened_problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await _tasks_on_calendar_ui(app, pilot, wait_for)
        burst(app, "4h")
        await wait_for(pilot, lambda: isinstance(app.screen, WordsModal))
        assert "WKAPZX" in app.screen.title_text and "calendar-api" in app.screen.title_text


async def test_a_panel_jump_then_accept_asks_about_the_problem_under_the_new_panels_cursor(
        weakened_problems, make_app, wait_for) -> None:
    from pilothouse.tui.screens.modals import ConfirmModal

    app = make_app(weakened_problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await _tasks_on_calendar_ui(app, pilot, wait_for)
        burst(app, "4a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        assert app.screen.title_text == "accept · WKAPZX"
        burst(app, "y")
        await wait_for(pilot, lambda: replies(weakened_problems))
        assert [(r["code"], r["reply"]) for r in replies(weakened_problems)] == [("WKAPZX", "accept")]


async def test_a_panel_jump_then_moves_move_the_new_panels_cursor(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first = app.dashboard.tasks.current_key
        order = list(app.dashboard.tasks.tasks)
        burst(app, "3jj")
        await wait_for(pilot, lambda: app.dashboard.focused is app.dashboard.tasks)
        await pilot.pause()
        assert app.dashboard.tasks.current_key == order[order.index(first) + 2]
        burst(app, "1kj4")  # Jobs: up to hello-world, down to first-draft, then Problems
        await wait_for(pilot, lambda: app.dashboard.focused is app.dashboard.problems)
        assert app.dashboard.jobs.current_key == "first-draft"


async def test_a_filter_typed_ahead_lands_in_the_filter(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        burst(app, "5/task")
        await wait_for(pilot, lambda: app.query_one("#filter").value == "task")
        assert app.dashboard.events.filter_text == "task"


def test_a_burst_typed_into_a_real_terminal_answers_the_problem_under_the_cursor(weakened_problems,
                                                                                tmp_path: Path) -> None:
    need_tmux()
    tmux = Tmux(tmp_path / "tmux.sock")
    tmux.start(f"{shlex.quote(sys.executable)} -m pilothouse view {shlex.quote(str(weakened_problems.root))}",
               width=80, height=24)
    try:
        tmux.wait_for("4 Problems", "KTRWMB")
        tmux.keys("3jj4a")  # one write: Tasks, down to calendar-ui, Problems (cursor on its first row), accept
        screen = tmux.wait_for("accept · ")
        assert "accept · KTRWMB" in screen, screen
        tmux.keys("n")
        tmux.keys("q")
        tmux.wait_for("COCKPIT-EXIT=0")
    finally:
        tmux.close()
