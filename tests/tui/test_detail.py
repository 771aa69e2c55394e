"""The run detail screen (enter on a task), driven through the real app against real run logs."""

from __future__ import annotations

import json

import pytest
from cockpit_support import RUN_API, RUN_UI, ts

pytestmark = pytest.mark.anyio

LONG = ("The month view renders six columns because the weekday header skips Sunday; "
        "adding it back and rerunning the gate now. END")


@pytest.mark.parametrize("width", [120, 125, 129])
async def test_worker_output_wraps_inside_its_pane(cockpit_repo, make_app, wait_for, width) -> None:
    from pilothouse.providers.paths import logs_dir
    from textual.widgets import RichLog

    with open(logs_dir() / "sim" / f"{RUN_API}.jsonl", "a") as fh:  # the worker says something long
        fh.write(json.dumps({"ts": ts(30), "kind": "text", "text": LONG}) + "\n")
        fh.write(json.dumps({"ts": ts(31), "kind": "tool", "name": "edit", "status": "ok",
                             "brief": "src/api.py"}) + "\n")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(width, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "enter")  # calendar-api, the running task: its run
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        log = app.screen.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: len(log.lines) > 3)
        pane = log.scrollable_content_region.width
        assert pane < 78  # the narrow pane this pins: RichLog's default renders 78 wide
        assert all(line.cell_length <= pane for line in log.lines)
        drawn = " ".join("".join(seg.text for seg in log.render_line(y)).strip() for y in range(log.size.height))
        assert " ".join(LONG.split()) in " ".join(drawn.split())


async def test_stream_hides_the_result_block_and_the_stale_waiting_line(cockpit_repo, make_app, wait_for) -> None:
    from cockpit_support import RUN_UI
    from pilothouse.providers.paths import logs_dir
    from textual.widgets import RichLog

    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "enter")  # calendar-ui: its run's log is not written yet
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        log = app.screen.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: log.lines)
        drawn = lambda: "\n".join(line.text for line in log.lines)  # noqa: E731
        assert "left no activity log" in drawn()  # its run finished: nothing is waited for
        path = logs_dir() / "sim" / f"{RUN_UI}.jsonl"
        path.write_text("\n".join(json.dumps(line) for line in [
            {"ts": ts(16), "kind": "text", "text": "Six columns it is. "},
            {"ts": ts(16), "kind": "text", "text": '<!--RESULT-->{"status":"complete","files_changed":'
                                                   '["src/ui.py"]}<!--/RESULT-->'},
            {"ts": ts(17), "kind": "tool", "name": "edit", "status": "ok", "brief": "src/ui.py"}]) + "\n")
        await wait_for(pilot, lambda: "Six columns" in drawn())
        assert "left no activity log" not in drawn()  # the log came after all: the note is stale
        assert "RESULT" not in drawn() and "files_changed" not in drawn()
        assert "result handed over" in drawn()


async def test_run_detail_answers_its_task_problem(cockpit_repo, make_app, wait_for) -> None:
    from test_cockpit import replies

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "enter")  # calendar-api: running, no problem
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        await pilot.press("r")
        await pilot.pause(0.3)
        assert not replies(cockpit_repo)
        await pilot.press("escape", "j", "enter")  # calendar-ui: stopped on KTRWMB
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail" and app.screen.task_id == "calendar-ui")
        await pilot.press("r")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert [(r["code"], r["reply"]) for r in replies(cockpit_repo)] == [("KTRWMB", "retry")]
        assert type(app.screen).__name__ == "RunDetail"  # answered without leaving it


async def test_a_run_that_did_not_complete_shows_its_reason_over_its_activity(cockpit_repo, make_app, wait_for) -> None:
    import sqlite3

    from cockpit_support import RUN_UI
    from textual.widgets import RichLog

    why = "no tool calls although the task needed them: the server likely dropped `tools` [red]x[/red]"
    db = sqlite3.connect(cockpit_repo.state_db)
    with db:
        db.execute("UPDATE runs SET verdict=? WHERE run_id=?", (json.dumps({"verdict": "empty", "reason": why}), RUN_UI))
    db.close()
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "enter")  # calendar-ui: its builder's run
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        log = app.screen.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: str(log.border_subtitle).startswith("empty: no tool calls although"))
        # the worker's words are shown as they are: markup in them is escaped, never interpreted
        assert str(log.border_subtitle).endswith("`tools` \\[red]x\\[/red]")


async def test_header_counts_tokens_and_time_while_the_run_goes(cockpit_repo, wait_for) -> None:
    """`tokens 0 elapsed 0s` during a run: the store's count lags the stream, and the time never moved."""
    from datetime import timedelta

    from cockpit_support import NOW
    from pilothouse.core.state.store import connect
    from pilothouse.tui.app import CockpitApp

    db = connect(cockpit_repo.state_db)
    db.execute("UPDATE tasks SET tokens=0 WHERE task='calendar-api'")  # nothing recorded yet
    db.close()
    now = [NOW]
    app = CockpitApp(cockpit_repo, clock=lambda: now[0], live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "enter")  # calendar-api: running since 07:12
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        head = lambda: str(app.screen.query_one("#detail-head").render())  # noqa: E731
        await wait_for(pilot, lambda: "tokens 3.3k" in head())  # 1200+85 and 1800+240, from the stream
        assert "elapsed 18m00s" in head()
        now[0] = NOW + timedelta(minutes=2)
        await wait_for(pilot, lambda: "elapsed 20m00s" in head(), timeout=5)


async def test_a_finished_run_without_a_log_is_not_waited_for(cockpit_repo, make_app, wait_for) -> None:
    from textual.widgets import RichLog

    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "enter")  # calendar-store: its builder finished; no stream was kept
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail")
        log = app.screen.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: log.lines)
        drawn = "\n".join(line.text for line in log.lines)
        assert "this run left no activity log at" in drawn and "waiting for" not in drawn


async def test_gate_and_review_are_found_however_much_the_log_grew_since(cockpit_repo, make_app, wait_for) -> None:
    """The task's gate lies 10 MB back in events.jsonl (another task's busy worker since): the run detail
    reads it through the event index, not from the log's tail."""
    from cockpit_support import bury

    bury(cockpit_repo)
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j", "enter")  # calendar-ui: its fast gate failed
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail" and app.screen.side_loaded)
        gate = str(app.screen.query_one("#gate").render())
        assert "fast failed" in gate and "assert 6 == 7" in gate


async def test_one_run_detail_serves_every_task_and_shows_nothing_of_the_last(cockpit_repo, make_app,
                                                                                wait_for) -> None:
    """The screen is built once and pointed at each task opened: a content update, not a new screen
    (built, styled and laid out again on every enter). What the previous task showed is gone."""
    from textual.widgets import RichLog

    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "enter")  # calendar-api: its worker's stream, a running run
        await wait_for(pilot, lambda: type(app.screen).__name__ == "RunDetail" and app.screen.side_loaded)
        detail = app.screen
        log = detail.query_one("#stream", RichLog)
        await wait_for(pilot, lambda: "contract first" in "\n".join(line.text for line in log.lines))
        assert detail.follower is not None
        await pilot.press("tab")  # the focus leaves the stream
        assert app.focused is not log
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0])
        await wait_for(pilot, lambda: detail.follower is None)  # closed: its run is no longer followed
        await pilot.press("j", "enter")  # calendar-ui: stopped by its gate, no stream kept
        await wait_for(pilot, lambda: app.screen is detail and detail.side_loaded)
        assert detail.task_id == "calendar-ui"
        drawn = "\n".join(line.text for line in log.lines)
        assert "left no activity log" in drawn and "contract first" not in drawn and "src/api.py" not in drawn
        assert "calendar-ui" in str(detail.query_one("#detail-head").render())
        assert list(detail.query_one("#runs").rows) == [RUN_UI] and detail.run_id == RUN_UI
        assert str(detail.query_one("#runs").border_title) == "runs of calendar-ui"
        assert "fast failed" in str(detail.query_one("#gate").render())
        assert app.focused is log


@pytest.mark.parametrize("keys", [("3", "enter"), ("3", "j", "j", "D"), ("3", "j", "j", "G"), ("4", "enter"),
                                  ("question_mark",), ("C",), ("dollar_sign",)])
async def test_q_goes_back_everywhere_but_the_dashboard(cockpit_repo, ui_worktree, make_app, wait_for, keys) -> None:
    """q on the run detail (it quit the whole cockpit), the diff, the gate log, the problem dialog, the
    help, the settings and the usage screen goes back to the dashboard; only there does q quit."""
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        await wait_for(pilot, lambda: type(app.screen).__name__ != "Dashboard")
        opened = type(app.screen).__name__
        await pilot.press("q")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Dashboard")
        assert app.is_running, opened
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)


async def test_the_run_detail_is_built_after_the_first_paint_so_its_first_open_only_fills_it(
        cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.is_screen_installed("run-detail") and app.run_detail().is_mounted)
        detail = app.run_detail()
        assert detail not in app.screen_stack  # built off screen: the dashboard stays in front
        built = detail.query_one("#stream")
        await pilot.press("3", "j", "enter")  # calendar-api
        await wait_for(pilot, lambda: app.screen is detail and detail.task_id == "calendar-api")
        assert detail.query_one("#stream") is built  # the same widgets, filled: nothing composed again
        await wait_for(pilot, lambda: "calendar-api" in str(detail.query_one("#detail-head").render()))
