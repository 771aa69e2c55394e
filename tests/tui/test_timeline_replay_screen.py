"""The timeline's replay mode on the demo job's log: straight from `pilothouse replay`'s entry point, or
`R` on a timeline; the chart and the panel under it say what the job was at the moment shown, and the
keys move that moment (jumps to marks, the ends, scrubbing, playing)."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest
from cockpit_support import T0, frozen_clock, open_timeline
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
        before = screen.moment
        await pilot.press("space")
        # at 60x the demo plays through in a fraction of a second: on a loaded machine it may be over
        # by the time the test looks, so playing, or played from where it was to the end, passes
        assert screen.playing or (before != player.end and screen.moment == player.end)
        await wait_for(pilot, lambda: screen.moment == player.end)  # played to the end, where it stops
        assert not screen.playing


async def test_R_on_a_timeline_replays_from_the_cursors_bar_and_back(demo_repo, make_app, wait_for) -> None:
    app = make_app(demo_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timeline(pilot, wait_for)
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


def _footer(app: Any) -> dict[str, str]:
    """The footer's keys now, left to right: description -> the key it shows (the first, for one said twice)."""
    from textual.widgets._footer import FooterKey

    out: dict[str, str] = {}
    for k in app.screen.query(FooterKey):
        out.setdefault(str(k.description), k.key_display)
    return out


async def test_q_quits_a_replay_the_command_line_opened_and_the_footer_says_so(demo_repo, wait_for) -> None:
    """`pilothouse replay` asked for the replay: q leaves it for the shell (it went to the dashboard),
    as the footer says; esc still goes to the dashboard, as from any timeline."""
    app = _app(demo_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _ready(pilot, wait_for)
        await wait_for(pilot, lambda: _footer(app).get("Quit") == "q")
        assert "End replay" not in _footer(app)
        await pilot.press("R")  # the job as it is now: still the screen the command line opened
        await wait_for(pilot, lambda: not screen.replaying and _footer(app).get("Quit") == "q")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running or app.screen_stack[-1] is not screen)
        assert not app.is_running  # not to the dashboard


async def test_the_leave_key_remapped_quits_and_the_footer_names_it(demo_repo, wait_for) -> None:
    """q's three meanings are one binding id (timeline.leave): a remap moves them all together."""
    from test_keymap import _write

    _write("keys:\n  timeline.leave: x\n")
    app = _app(demo_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _ready(pilot, wait_for)
        await wait_for(pilot, lambda: _footer(app).get("Quit") == "x")
        assert screen.active_bindings["x"].binding.action == "leave('quit')"
        await pilot.press("x")
        await wait_for(pilot, lambda: not app.is_running)


async def test_q_ends_a_replay_begun_with_R_back_to_the_timeline(demo_repo, make_app, wait_for) -> None:
    app = make_app(demo_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_timeline(pilot, wait_for)
        assert "Quit" not in _footer(app) and "End replay" not in _footer(app)  # q is Back, as esc
        await pilot.press("R")
        await _ready(pilot, wait_for)
        await wait_for(pilot, lambda: _footer(app).get("End replay") == "q")
        await pilot.press("q")
        await wait_for(pilot, lambda: not screen.replaying and "End replay" not in _footer(app))
        assert app.screen is screen and screen.chart.moment is None
        await pilot.press("q")  # the timeline's q: back to the dashboard, where q quits
        await wait_for(pilot, lambda: app.screen is app.dashboard)
        assert app.is_running


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("opened", ["command line", "R"])
async def test_the_replays_footer_fits_with_every_key_a_replay_needs(demo_repo, make_app, wait_for, size,
                                                                     opened) -> None:
    """The replay offers more keys than 80 columns (or 120) hold: the timeline's own ones the help lists
    go first (R, enter, b, +), so none is cut at the edge and the replay's keys are all whole."""
    from test_footer import _cut

    app = _app(demo_repo) if opened == "command line" else make_app(demo_repo)
    async with app.run_test(size=size) as pilot:
        if opened == "R":
            await open_timeline(pilot, wait_for)
            await pilot.press("R")
        await _ready(pilot, wait_for)
        leave = "Quit" if opened == "command line" else "End replay"

        def laid_out() -> bool:  # the footer built and placed at this width (not half-way through)
            cut, keys = _cut(app)
            return cut == [] and leave in keys

        await wait_for(pilot, laid_out)
        cut, shown = _cut(app)
        assert shown >= {leave, "Play/pause", "Slower", "Faster", "Next mark", "Back", "Help"}, shown
        if size == (120, 40):
            assert "By task/slot" in shown and "Zoom" in shown
            await pilot.resize_terminal(80, 24)  # narrower while it is up: the footer is built again to fit

            def narrow() -> bool:  # built again and laid out (an empty or unplaced footer is no answer)
                cut, keys = _cut(app)
                return cut == [] and leave in keys and "By task/slot" not in keys

            await wait_for(pilot, narrow)
            cut, shown = _cut(app)
            assert cut == [] and shown >= {leave, "Play/pause", "Slower", "Faster", "Next mark", "Help"}, (cut, shown)
