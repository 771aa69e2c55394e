"""The cockpit against real state: a real state.db, a real events.jsonl appended by EventLog while the
app runs, and the real core calls behind each key (answering.act, jobs.create_job/update_job)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.core.state.store import connect

pytestmark = pytest.mark.anyio  # anyio's pytest plugin runs the async tests (asyncio backend)


def replies(layout: RepoLayout) -> list[sqlite3.Row]:
    conn = connect(layout.state_db, readonly=True)
    try:
        return conn.execute("SELECT * FROM replies ORDER BY id").fetchall()
    finally:
        conn.close()


def events_of(layout: RepoLayout, etype: str) -> list[dict[str, Any]]:
    with open(layout.events) as fh:
        return [e for e in map(json.loads, fh) if e["type"] == etype]


async def test_dashboard_draws_the_store(cockpit_repo, make_app) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        dash = app.dashboard
        assert list(dash.jobs.jobs) == ["hello-world", "first-draft"]
        assert dash.tasks.job == "first-draft"  # the unfinished job is selected
        assert [k.value for k in dash.tasks.rows] == ["calendar-store", "calendar-api", "calendar-ui",
                                                      "calendar-sync", "calendar-docs"]
        assert "KTRWMB" in dash.problems.problems
        assert {k.value for k in dash.providers.rows} == {"sim\tfive_hour", "sim\tweekly", "sim-b\tfive_hour"}
        assert dash.events.lines[-1].startswith("07:10:30 run.activity")
        assert "supervisor.heartbeat" not in " ".join(dash.events.lines)
        assert "stopped" in app.status_line().plain
        await pilot.press("2")
        assert app.focused is dash.providers
        await pilot.press("1", "enter")  # enter on a job: its tasks
        assert app.focused is dash.tasks
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen is dash


async def test_a_blocked_provider_is_listed_first(cockpit_repo, make_app) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert [k.value for k in app.dashboard.providers.rows] == ["sim-b\tfive_hour", "sim\tfive_hour",
                                                                   "sim\tweekly"]


async def test_events_update_rows_in_place(cockpit_repo, make_app, wait_for) -> None:
    """A supervisor's write + event reach the screen; the row changes in place, the log follows."""
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        tasks = app.dashboard.tasks
        before = tasks.row_count
        db = connect(cockpit_repo.state_db)
        db.execute("UPDATE tasks SET activity='bash python -m pytest', tokens=17000 "
                   "WHERE job='first-draft' AND task='calendar-api'")
        EventLog(cockpit_repo.events).append("run.activity", job="first-draft", task="calendar-api",
                                             data={"tool": "bash python -m pytest"})
        await wait_for(pilot, lambda: "bash python" in str(tasks.get_cell("calendar-api", "activity")))
        assert tasks.row_count == before
        assert tasks.get_cell("calendar-api", "tokens") == "17.0k"
        await pilot.pause()
        drawn = app.export_screenshot().replace("&#160;", " ")  # the row is redrawn, not just stored
        assert "bash python -m" in drawn and "17.0k" in drawn
        assert "bash python -m pytest" in app.dashboard.events.lines[-1]
        # a task planned by a re-plan: the table grows
        db.execute("INSERT INTO tasks (job, task, state, kind, depends_on, updated_at) VALUES "
                   "('first-draft', 'calendar-i18n', 'planned', 'SAFE_PARALLEL', '[\"calendar-ui\"]', 'x')")
        EventLog(cockpit_repo.events).append("task.state", job="first-draft", task="calendar-i18n",
                                             data={"from": None, "to": "planned"})
        await wait_for(pilot, lambda: "calendar-i18n" in tasks.tasks)
        assert tasks.row_count == before + 1
        # a problem closes: its row goes
        db.execute("UPDATE problems SET state='closed' WHERE code='KTRWMB'")
        EventLog(cockpit_repo.events).append("problem.closed", job="first-draft", task="calendar-ui",
                                             data={"code": "KTRWMB"})
        await wait_for(pilot, lambda: app.dashboard.problems.row_count == 0)
        db.close()


async def test_scrolling_up_pauses_follow(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    log = EventLog(cockpit_repo.events)
    for n in range(30):
        log.append("run.usage", job="first-draft", task="calendar-api", data={"tokens": {"input": n}})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        events = app.dashboard.events
        await pilot.press("5")
        assert app.focused is events and events.follow
        await pilot.press("k", "k")
        assert not events.follow
        log.append("merge.finished", job="first-draft", task="calendar-store", data={"sha": "abc"})
        log.append("merge.finished", job="first-draft", task="calendar-api", data={"sha": "def"})
        await wait_for(pilot, lambda: events.new_count == 2)
        assert "paused · 2 new" in str(events.border_title)  # narrow: no bottom border for a subtitle
        await pilot.press("f")
        assert events.follow and events.new_count == 0
        assert events.scroll_y == events.max_scroll_y


async def test_filter_narrows_the_focused_panel(cockpit_repo, make_app) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "slash", *"stopped", "enter")
        assert [k.value for k in app.dashboard.tasks.rows] == ["calendar-ui"]
        await pilot.press("slash", "escape")
        assert app.dashboard.tasks.row_count == 5


async def test_retry_by_key_reaches_store_and_log(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "r")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        row = replies(cockpit_repo)[0]
        assert (row["code"], row["reply"], row["words"]) == ("KTRWMB", "retry", None)
        assert row["who"].endswith("@cockpit")
        answered = events_of(cockpit_repo, "problem.answered")
        assert answered[-1]["data"]["reply"] == "retry"
        # drawn from the event log once it comes back, not before
        await wait_for(pilot, lambda: any("problem.answered" in line for line in app.dashboard.events.lines))


async def test_refused_reply_shows_cores_message(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.core.stops import answering

    app = make_app(cockpit_repo)  # not live: the answer below is not seen before the key
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        answering.act(cockpit_repo, "KTRWMB", "retry", who="someone@cli")
        await pilot.press("4", "a")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")  # accept merges: it asks
        await pilot.press("y")
        await wait_for(pilot, lambda: app._notifications)
        message = next(iter(app._notifications)).message
        assert "was already answered" in message
        assert len(replies(cockpit_repo)) == 1


async def test_skip_confirms_listing_the_cancelled_tasks(cockpit_repo, make_app, wait_for) -> None:
    from pilothouse.tui.screens.modals import ConfirmModal

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        body = app.screen.body
        assert "calendar-ui" in body and "calendar-docs" in body  # the task and its dependent
        await pilot.press("enter")  # Enter cancels (no is the default for what cannot be undone)
        await pilot.pause(0.3)
        assert app.screen is app.dashboard and not replies(cockpit_repo)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert replies(cockpit_repo)[0]["reply"] == "skip"
        assert events_of(cockpit_repo, "problem.answered")[-1]["data"]["cancels"] == ["calendar-ui",
                                                                                      "calendar-docs"]


async def test_hint_takes_words(cockpit_repo, make_app, wait_for, wait_for_input) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "enter")  # through the problem dialog
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ProblemDialog")
        await pilot.press("h")
        await wait_for_input(pilot, "WordsModal")
        from test_events_panel import screen_text

        shown = screen_text(app)  # what the hint answers: the reason and the gate's failing line
        assert "month view renders 6 columns" in shown and "FAILED tests/test_ui.py::test_month" in shown
        await pilot.press(*"render 7 columns", "enter", *"keep Sunday", "ctrl+s")  # enter: a new line
        await wait_for(pilot, lambda: replies(cockpit_repo))
        row = replies(cockpit_repo)[0]
        assert (row["reply"], row["words"]) == ("hint", "render 7 columns\nkeep Sunday")


async def test_dismiss_and_plan_on_a_problem_that_takes_them(cockpit_repo, make_app, wait_for,
                                                              wait_for_input) -> None:
    db = connect(cockpit_repo.state_db)
    db.execute("INSERT INTO problems (code, job, task, kind, summary, replies, state, opened_at) VALUES "
               "('HXPQRT', 'first-draft', 'calendar-api', 'scope_request', 'wants src/db.py too', "
               "'[\"dismiss\", \"plan\"]', 'open', '2026-11-29T07:29:00.000Z')")
    db.close()
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "j", "p")
        await wait_for_input(pilot, "WordsModal")
        await pilot.press(*"split the db work out", "ctrl+s")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert [(r["code"], r["reply"], r["words"]) for r in replies(cockpit_repo)] == [
            ("HXPQRT", "plan", "split the db work out")]
    from pilothouse.core.stops import problems

    db = connect(cockpit_repo.state_db)
    db.execute("DELETE FROM replies")  # as if the supervisor had consumed it and re-opened a fresh ask
    db.close()
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("4", "j", "d")
        await wait_for(pilot, lambda: replies(cockpit_repo))
        assert replies(cockpit_repo)[0]["reply"] == "dismiss"
    assert problems  # core's own module is what the keys called


async def test_new_job_and_correction(cockpit_repo, make_app, wait_for, wait_for_input) -> None:
    from pilothouse.core.records import jobs

    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        await pilot.press(*"week-view", "tab", *"Show a week view.", "ctrl+s")
        await wait_for(pilot, lambda: "week-view" in app.dashboard.jobs.jobs)
        assert jobs.load_job(cockpit_repo, "week-view").request == "Show a week view."
        assert app.dashboard.jobs.jobs["week-view"].state == "new"
        app.dashboard.jobs.select_key("week-view")
        await pilot.pause()
        await pilot.press("e")
        await wait_for_input(pilot, "JobForm")
        await pilot.press("end", *" Start on Monday.", "ctrl+s")
        await wait_for(pilot, lambda: jobs.load_job(cockpit_repo, "week-view").revision == 2)
        assert jobs.load_job(cockpit_repo, "week-view").request == "Show a week view. Start on Monday."
        await wait_for(pilot, lambda: app.dashboard.jobs.jobs["week-view"].revision == 2)


async def test_bad_job_name_is_refused_in_the_form(cockpit_repo, make_app, wait_for_input) -> None:
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await wait_for_input(pilot, "JobForm")
        await pilot.press(*"Bad Name", "tab", *"x", "ctrl+s")
        await pilot.pause()
        assert type(app.screen).__name__ == "JobForm" and app.screen.error.startswith("name:")
        await pilot.press("escape", "y")  # typed text: discarding asks first
        assert not (cockpit_repo.jobs_dir / "Bad Name.json").exists()


async def test_repo_picker(tmp_path, make_app) -> None:
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.picker import RepoPicker

    a, b = RepoLayout(tmp_path / "alpha"), RepoLayout(tmp_path / "beta")
    app = CockpitApp(None, [a, b], live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RepoPicker)
        await pilot.press("j", "enter")
        await pilot.pause()
        assert app.layout == b
        assert "beta" in app.status_line().plain


def test_view_outside_any_repo_says_what_to_do(cli, tmp_path) -> None:
    for args in (("view",), ()):  # bare `pilothouse` is `pilothouse view`
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 2
        assert "not inside a git repository" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("view", "no-such-repo", cwd=tmp_path)
    assert proc.returncode == 2 and "registered" in proc.stderr


async def test_a_fresh_repository_fills_in_live(git_repo, make_app, wait_for) -> None:
    """No .ai/ yet: the cockpit opens empty, then picks up the first job as soon as it is written."""
    from pilothouse.core.records import jobs

    layout = RepoLayout(git_repo)
    app = make_app(layout, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.dashboard.jobs.row_count == 0
        assert "run `pilothouse init`" in app.status_line().plain  # no .ai/project.yaml yet
        jobs.create_job(layout, "first", "Add a subtract() helper.")
        await wait_for(pilot, lambda: "first" in app.dashboard.jobs.jobs)
        assert any("job.created" in line for line in app.dashboard.events.lines)


async def test_abort_a_running_worker(cockpit_repo, make_app, wait_for) -> None:
    """x on a running task: core.supervisor_ctl.abort_run interrupts the worker's process group."""
    import os
    import subprocess

    from pilothouse.core.dispatch.runs import pid_start

    worker = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a dispatch leads its own group
    db = connect(cockpit_repo.state_db)
    db.execute("UPDATE runs SET pid=?, pid_start=? WHERE run_id='20261129T071200Z-a11ce001'",
               (worker.pid, pid_start(worker.pid)))
    db.close()
    app = make_app(cockpit_repo)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("3", "j")
            assert app.dashboard.current_task.task == "calendar-api"
            await pilot.press("x")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
            await pilot.press("y")
            await wait_for(pilot, lambda: worker.poll() is not None)
            await wait_for(pilot, lambda: any("aborted" in n.message for n in app._notifications))
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait()


async def test_starting_the_supervisor_without_bubblewrap_is_refused_with_the_fix(
        cockpit_repo, make_app, wait_for, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """S on a machine without bubblewrap: the one line `job start` gives, and no supervisor."""
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(tmp_path / "no-bwrap-here"))
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert not app.supervisor_alive()
        await pilot.press("S")
        await wait_for(pilot, lambda: any("refusing to start" in str(n.message) for n in app._notifications))
        said = next(str(n.message) for n in app._notifications if "refusing to start" in str(n.message))
        assert "apt-get install bubblewrap" in said and "confinement: off" in said
        assert not app.supervisor_alive()


async def test_a_directory_in_place_of_the_event_log_is_one_notification_and_the_cockpit_opens(
        cockpit_repo, make_app) -> None:
    """The line every reader says about a log that is no file, shown once; the rest of the cockpit
    (state.db's jobs and tasks) still opens and follows."""
    cockpit_repo.events.unlink()
    cockpit_repo.events.mkdir()
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        said = [str(n.message) for n in app._notifications if "not the event log" in str(n.message)]
        assert said == [f"{cockpit_repo.events} is a directory, not the event log: move it aside (mv "
                        f"{cockpit_repo.events} {cockpit_repo.events}.aside) and run this again; the next event "
                        "starts a new log there"]
        assert app.is_running


async def test_hostile_event_lines_and_a_rewritten_log_keep_the_cockpit_following(cockpit_repo, make_app,
                                                                                  wait_for) -> None:
    """A job that is a list, a task that is a dict, a ts that is a number: skipped, said once in a
    notification; after the log is truncated and written again (seq back at 1) new events still show."""
    with open(cockpit_repo.events, "ab") as fh:
        fh.write(b'{"seq": 900, "type": "task.state", "job": ["x"], "task": "calendar-api"}\n'
                 b'{"seq": 901, "type": "task.state", "job": "first-draft", "task": {"a": 1}}\n'
                 b'{"seq": 902, "type": "run.activity", "ts": 17, "job": "first-draft"}\n')
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert [n.message for n in app._notifications if "not events" in n.message]
        with open(cockpit_repo.events, "ab") as fh:
            fh.write(b'{"seq": 903, "type": "merge.finished", "job": "first-draft", "data": {"sha": 5}, "ts": []}\n')
        log = EventLog(cockpit_repo.events)
        log.append("run.activity", job="first-draft", task="calendar-api", data={"tool": "after garbage"})
        await wait_for(pilot, lambda: "after garbage" in app.dashboard.events.lines[-1])
        with open(cockpit_repo.events, "r+b") as fh:
            fh.truncate(0)
        for i in range(60):
            log.append("run.activity", job="first-draft", task="calendar-api", data={"tool": f"rewritten {i}"})
        await wait_for(pilot, lambda: "rewritten 59" in app.dashboard.events.lines[-1])
        assert app.is_running
        assert len([n for n in app._notifications if "not events" in n.message]) == 1


def test_gate_view_shows_what_the_gate_measured() -> None:
    from pilothouse.tui.screens.run_sections import gate_text

    counts = {"collected": 9, "passed": 3, "failed": 2, "skipped": 2, "xfailed": 1, "errors": 1, "source": "junit"}
    shown = gate_text([{"ts": 0, "data": {"level": "full", "passed": False, "exit_code": 1, "counts": counts}}]).plain
    assert "9 tests: 3 passed · 2 failed · 2 skipped · 1 xfailed · 1 errors (junit)" in shown


async def test_a_damaged_store_and_why_the_supervisor_stopped_are_in_the_status_bar(cockpit_repo, make_app) -> None:
    from pilothouse.core.supervisor import health

    layout = cockpit_repo
    health.record_stop(layout, f"{layout.state_db} was locked by pid 4242 for over 130 s, so the supervisor "
                               "stopped")
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "was locked by pid 4242" in app.status_line().plain
    for p in layout.runtime.glob("state.db*"):
        p.unlink()
    layout.state_db.write_bytes(b"")  # emptied, while the event log shows a supervisor ran here
    EventLog(layout.events).append("supervisor.started", data={"pid": 1})
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        line = app.status_line().plain
        assert "state.db is empty" in line and "maintain repair" in line, line
