"""The timeline screen (`T`): a real demo job's lanes, enter on a bar opening that bar's run, the chart
following events appended to the log while it is open, and a worker's text drawn as the words it is."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cockpit_support import open_timeline
from demo_log import FIXTURE
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import events as core_events
from pilothouse.core.state.events import EventLog, parse_ts

pytestmark = pytest.mark.anyio

HOSTILE = "[red]x[/] \x1b]0;owned\x07 \x1b[2J gone"


def _screen_text(app: Any) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def _after_the_log(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Events appended now carry a time just after the recorded job's last one (its day, not today's)."""
    last = parse_ts(json.loads(FIXTURE.read_text().splitlines()[-1])["ts"])
    assert last is not None
    at = last + timedelta(seconds=seconds)
    monkeypatch.setattr(core_events, "utc_now_iso", lambda: at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z")


async def test_enter_on_a_bar_of_the_real_demo_opens_that_bars_run_not_the_tasks_last(
        cli: Any, tmp_path: Path, make_app: Any, wait_for: Any) -> None:
    from pilothouse.tui.screens.detail import RunDetail

    root = tmp_path / "demo"
    r = cli("demo", "--follow", "--dir", str(root), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    app = make_app(RepoLayout(root))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timeline(pilot, wait_for)
        assert screen.by == "slot" and [lane.label for lane in screen.timeline.lanes] == ["slot 1", "slot 2", "slot 3"]
        await pilot.press("b")  # by task: the lanes in the plan's order, whichever builder finished first
        assert [lane.key for lane in screen.timeline.lanes] == ["(job)", "add-slugify", "add-wordcount",
                                                                "add-titlecase", "export-api"]
        await pilot.press("j", "j", "j", *["h"] * 12)  # add-titlecase's lane, its first bar
        bar = screen.chart.current
        assert (bar.task, bar.state, bar.role) == ("add-titlecase", "building", "builders")
        last = [b for b in screen.timeline.lanes[3].bars if b.run][-1].run
        assert bar.run and bar.run != last  # the reviewer of round 2 is the task's run now
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunDetail) and app.screen.run_id is not None)
        assert (app.screen.task_id, app.screen.run_id) == ("add-titlecase", bar.run)
        await pilot.press("escape")
        assert app.screen is screen
        await pilot.press("l")  # the next bar, gating: still the builder's run
        assert screen.chart.current.state == "gating" and screen.chart.current.run == bar.run
        # the job's own lane: its planning bar is the assigner's run, opened as a task's run is
        await pilot.press("k", "k", "k", *["h"] * 12)
        plan = screen.chart.current
        assert (plan.task, plan.state, plan.role) == (None, "planning", "planner") and plan.run
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunDetail) and app.screen.run_id is not None)
        assert (app.screen.task_id, app.screen.run_id) == (None, plan.run)
        assert "assigner plan on sim (simulator)" in _screen_text(app)
        await pilot.press("escape")
        await pilot.press(*["l"] * 12)  # its last bar: the full gate, which no worker held
        gate = screen.chart.current
        assert (gate.task, gate.state, gate.run) == (None, "gating", None)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen and "no run to open: gating here was no worker's" in _screen_text(app)
        await pilot.press("h")
        assert "no run to open" not in _screen_text(app)


async def test_the_cursor_line_of_a_simulator_run_says_its_cost_is_the_simulator_s(
        demo_repo: Any, make_app: Any, wait_for: Any) -> None:
    app = make_app(demo_repo)
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await open_timeline(pilot, wait_for)
        await pilot.press("l")
        assert screen.chart.current.provider == "sim" and screen.chart.current.usage is not None
        assert "$0.00 (simulator)" in _screen_text(app) and "(measured)" not in _screen_text(app)


async def test_T_is_offered_for_a_selected_job_and_the_palette_has_timeline(demo_repo, make_app, wait_for) -> None:
    from pilothouse.tui.screens.timeline import TimelineScreen

    app = make_app(demo_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.selected_job == "demo")
        assert app.check_action("timeline", ()) is True
        assert "Timeline" in [c.title for c in app.get_system_commands(app.dashboard)]
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen))
        assert app.check_action("timeline", ()) is False  # not again from the timeline itself
        await pilot.press("escape")
        assert app.screen is app.dashboard


async def test_events_appended_while_it_is_open_are_folded_in_without_reading_the_log_again(
        demo_repo, make_app, wait_for, monkeypatch) -> None:
    app = make_app(demo_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timeline(pilot, wait_for)
        await pilot.press("b")
        fold, drawn = screen.fold, screen.redraws
        assert "add-docs" not in _screen_text(app)
        _after_the_log(monkeypatch, 2)
        log = EventLog(demo_repo.events)
        # a re-plan adds a task, and its builder starts at once: one burst, one redraw
        log.append("job.revised", job="demo", data={"revision": 2})
        log.append("task.state", job="demo", task="add-docs", data={"from": None, "to": "planned"})
        log.append("task.state", job="demo", task="add-docs", run="20261129T070011Z-d0c5d0c5",
                   data={"from": "ready", "to": "running", "reason": "add-docs: 'simulator' (sim)"})
        await wait_for(pilot, lambda: "add-docs" in _screen_text(app))
        assert screen.fold is fold  # the kept fold, extended: the log was not read again
        assert screen.redraws - drawn <= 3  # the follower may hand the three lines over in one batch or a few
        assert screen.timeline.state == "planning" and screen.timeline.lanes[-1].key == "add-docs"
        assert screen.timeline.lanes[-1].bars[0].state == "building"
        assert "5 tasks" in _screen_text(app)


async def test_a_problem_summary_with_markup_and_escapes_is_drawn_as_its_words(demo_repo, make_app, wait_for,
                                                                            monkeypatch) -> None:
    _after_the_log(monkeypatch, 1)
    log = EventLog(demo_repo.events, redact=lambda s: s)
    log.append("task.state", job="demo", task="export-api", data={"from": "done", "to": "stopped",
                                                                "reason": HOSTILE})
    log.append("problem.opened", job="demo", task="export-api", data={"code": "HSTLXX", "kind": "gate_failed",
                                                                     "summary": HOSTILE})
    app = make_app(demo_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timeline(pilot, wait_for)
        await pilot.press("b", *["j"] * 4, *["l"] * 12)  # export-api's last bar: waiting for the operator
        assert screen.chart.current.state == "waiting_operator"
        shown = _screen_text(app)
        assert "[red]x[/]" in shown and "gone" in shown  # the words, as words
        assert "\x1b" not in shown and "\x07" not in shown
        from pilothouse.tui.screens.timeline import describe

        info = describe(screen.chart.current, screen.timeline)
        assert info.plain.count("[red]x[/]") == 2  # the reason and the problem's summary
        assert all(info.plain[s.start:s.end] == "!" for s in info.spans if "red" in str(s.style))  # only the mark
