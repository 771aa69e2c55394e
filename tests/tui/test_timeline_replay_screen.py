"""The timeline's replay mode on the demo job's log: straight from `pilothouse replay`'s entry point, or
`R` on a timeline; the chart and the panel under it say what the job was at the moment shown, and the
keys move that moment (jumps to marks, the ends, scrubbing, playing)."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest
from cockpit_support import T0, frozen_clock
from pilothouse.core.queries.replay import Replay

pytestmark = pytest.mark.anyio

AT = T0 + timedelta(seconds=5.3)  # add-wordcount merged, add-slugify approved, add-titlecase building again


def _app(layout: Any, at: Any = AT, speed: float = 10.0) -> Any:
    from pilothouse.tui.replay import replay_app

    return replay_app(layout, "demo", at, speed, clock=frozen_clock, live=False)


async def _ready(pilot: Any, wait_for: Any) -> Any:
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.loaded
                   and app.screen.events_moment == app.screen.moment)
    return app.screen


def test_the_replay_commands_entry_point_takes_layout_job_moment_and_speed() -> None:
    from pilothouse.tui import replay

    assert list(inspect.signature(replay.run).parameters) == ["layout", "job", "at", "speed"]


async def test_it_opens_straight_on_the_moment_and_says_each_tasks_state_then(demo_repo, wait_for) -> None:
    app = _app(demo_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _ready(pilot, wait_for)
        assert screen.replaying and screen.moment == AT and len(app.screen_stack) == 2
        truth = Replay(demo_repo.events, "demo").at(AT, by="task")
        assert [(t.task, t.state) for t in screen.timeline.tasks] == [(t.task, t.state) for t in truth.tasks]
        tasks = str(screen.query_one("#replay-tasks").render())
        for t in truth.tasks:
            assert t.task in tasks and t.state in tasks
        # no bar of the chart goes past the moment
        assert all(b.start <= AT and (b.end is None or b.end <= AT) for lane in screen.timeline.lanes
                   for b in lane.bars)
        await pilot.press("escape")
        assert app.screen is app.dashboard


async def test_jumps_ends_scrubbing_and_playing_move_the_moment(demo_repo, wait_for) -> None:
    player = Replay(demo_repo.events, "demo")
    merges = [m.at for m in player.at(player.end).marks if m.kind == "merge"]
    app = _app(demo_repo, at=player.start)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _ready(pilot, wait_for)
        await pilot.press("n")
        assert screen.moment == merges[0]
        await pilot.press("n", "n", "N")
        assert screen.moment == merges[1]
        await pilot.press("end")
        assert screen.moment == player.end and screen.timeline.state == "accepted"
        await pilot.press("home")
        assert screen.moment == player.start
        await pilot.press("right")  # a column of the chart's time on
        assert screen.moment > player.start
        await pilot.press("left", "left")
        assert screen.moment == player.start  # never before the job
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert screen.speed == 600.0
        await pilot.press("left_square_bracket")
        assert screen.speed == 60.0
        await pilot.press("space")
        assert screen.playing
        await wait_for(pilot, lambda: screen.moment == player.end)  # played to the end, where it stops
        assert not screen.playing


async def test_R_on_a_timeline_replays_from_the_cursors_bar_and_back(demo_repo, make_app, wait_for) -> None:
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = make_app(demo_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.selected_job == "demo")
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.loaded)
        screen = app.screen
        assert screen.check_action("play", ()) is False  # the replay keys are off until R
        await pilot.press("l", "l")
        bar = screen.chart.current
        await pilot.press("R")
        await _ready(pilot, wait_for)
        assert screen.moment == bar.start and screen.check_action("play", ()) is True
        await pilot.press("R")
        assert not screen.replaying and screen.chart.moment is None
        assert screen.timeline.state == "accepted" and screen.timeline.end is not None


def test_pilothouse_replay_on_a_terminal_opens_the_cockpit_on_the_replay_screen(demo_repo, tmp_path) -> None:
    import shlex
    import sys

    from tmux_support import Tmux, need_tmux

    need_tmux()
    tmux = Tmux(tmp_path / "tmux.sock")
    app = f"{shlex.quote(sys.executable)} -m pilothouse replay demo --at +3s --repo {shlex.quote(str(demo_repo.root))}"
    tmux.run("new-session", "-d", "-s", tmux.name, "-x", "120", "-y", "40",
             f"sh -c '{app}; echo REPLAY-EXIT=$?; sleep 30'")
    try:
        screen = tmux.wait_for("replay demo", "+3.0s of", "tasks then", "Play/pause", timeout=60)
        assert "slot 1" in screen and "add-slugify" in screen
        tmux.keys("escape")  # back to the dashboard, as from any timeline
        tmux.wait_for("Jobs", "Tasks", timeout=60)
        tmux.keys("q")
        screen = tmux.wait_for("REPLAY-EXIT=0", timeout=60)
        assert "Play/pause" not in screen  # the terminal is restored
    finally:
        tmux.run("kill-server")
