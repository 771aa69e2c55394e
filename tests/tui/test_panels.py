"""The dashboard's tables, through the real app against a real state.db."""

from __future__ import annotations

import pytest
from cockpit_support import shown
from pilothouse.core.state.store import connect
from support import guard
from test_cockpit import replies

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_problems_name_their_job(cockpit_repo, make_app, size) -> None:
    from pilothouse.core.stops import problems

    other = problems.open_problem(cockpit_repo, "hello-world", "calendar-ui", "gate_failed",
                                  "The fast gate failed twice.")  # the same task name, another job
    app = make_app(cockpit_repo)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.dashboard.problems
        # a column of its own when wide; narrow, in the task's cell (job/task) as the jobs differ
        assert ("job" in [key for key, _ in table._layout]) == (size[0] >= 110)
        rows = {code: [str(c) for c in table.get_row(code)] for code in (other.code, "KTRWMB")}
        assert any("hello-world" in c for c in rows[other.code]) and any("first-draft" in c for c in rows["KTRWMB"])
        assert rows[other.code] != rows["KTRWMB"]


async def test_status_line_keeps_help_when_a_problem_waits_at_80(cockpit_repo, make_app) -> None:
    from test_events_panel import screen_text

    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first = screen_text(app).strip("\n").splitlines()
        top = next(line for line in first if "1 problem" in line)
        assert "? help" in top
        assert "supervisor stopped · S starts" in top and "…" not in top  # whole at 80 columns


async def test_a_provider_whose_model_failed_the_probe_is_marked_in_the_providers_panel(cockpit_repo, make_app,
                                                                                         cli, tmp_path) -> None:
    scenario = tmp_path / "forced-only.yaml"
    scenario.write_text("name: forced-only\ndescription: tool calls only when forced\nscripts:\n"
                        "  - match: {contains: ['pilothouse capability probe: tool call (forced)']}\n"
                        "    turns: [{actions: [{read: {path: README.md}}]}]\n"
                        "  - match: {contains: ['pilothouse capability probe: result block']}\n"
                        "    turns: [{say: '<!--RESULT-->{\"probe\": \"ok\"}<!--/RESULT-->'}]\n"
                        "  - turns: [{say: OK}]\n")
    assert cli("providers", "check", "sim", "--scenario", str(scenario), cwd=tmp_path).returncode == 0
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.dashboard.providers
        cells = {key: str(table.get_row(key)[0]) for key in ("sim\tfive_hour", "sim-b\tfive_hour")}
        assert cells["sim\tfive_hour"] == "● sim (simulated) ✗tools", cells
        assert "✗" not in cells["sim-b\tfive_hour"]  # never probed: no mark


OVER_BUDGET = """
name: over-budget
description: the one task's builder passes budgets.job_tokens; the gate passes and the job is accepted
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: one"]}
    turns:
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
        usage: {input: 4000, output: 900}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def accepted_sim_job(tmp_path, scenario_text: str, **project: object):
    """A sim job run to its end by the real supervisor (`--once`), quick gates and no review."""
    import subprocess
    import sys

    import yaml
    from pilothouse.core import demo
    from support import git

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(scenario_text)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data.update(project)
    layout.project_yaml.write_text(yaml.safe_dump(data))
    git(layout.root, "commit", "-qam", "quick gates")
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    return layout


async def test_a_budget_problem_closes_when_its_job_is_accepted(tmp_path, make_app, wait_for) -> None:
    """The budget held launches; the job finished all the same, so nothing is left for it to hold."""
    from pilothouse.core.state.store import connect

    layout = accepted_sim_job(tmp_path, OVER_BUDGET, budgets={"job_tokens": 1000})
    db = connect(layout.state_db, readonly=True)
    try:
        assert db.execute("SELECT state FROM jobs_state WHERE job='demo'").fetchone()[0] == "accepted"
        budget = db.execute("SELECT code, state FROM problems WHERE kind='budget'").fetchall()
    finally:
        db.close()
    assert [b["state"] for b in budget] == ["closed"]  # it was opened, and the acceptance closed it
    app = make_app(layout)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.dashboard.problems.problems == {}
        assert "problem" not in app.status_line().plain


async def test_elapsed_leaves_out_the_wait_for_the_operator(cockpit_repo, wait_for) -> None:
    """After a retry a task's time goes on from where it stopped (it jumped 3s → 1m19s); a blocked job's
    time stands still."""
    from datetime import timedelta

    from cockpit_support import NOW, ts
    from pilothouse.core.state.events import EventLog
    from pilothouse.core.state.store import connect
    from pilothouse.tui.app import CockpitApp

    now = [NOW]
    app = CockpitApp(cockpit_repo, clock=lambda: now[0], live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        tasks, jobs = app.dashboard.tasks, app.dashboard.jobs
        assert tasks.get_cell("calendar-ui", "elapsed") == "12m00s"  # ran 15 → 27, stopped there
        # the operator answered retry; the supervisor closed the problem and runs the gate again
        db = connect(cockpit_repo.state_db)
        db.execute("UPDATE problems SET state='closed', closed_at=? WHERE code='KTRWMB'", (ts(29.5),))
        db.execute("UPDATE tasks SET state='gating', updated_at=? WHERE task='calendar-ui'", (ts(29.5),))
        db.close()
        log = EventLog(cockpit_repo.events)
        log.append("problem.closed", job="first-draft", task="calendar-ui", data={"code": "KTRWMB"})
        log.append("task.state", job="first-draft", task="calendar-ui", data={"from": "stopped", "to": "gating"})
        await wait_for(pilot, lambda: str(tasks.get_cell("calendar-ui", "state")) == "gating")
        assert tasks.get_cell("calendar-ui", "elapsed") == "12m30s"  # 15 → 30 less the 2.5 minutes it waited
        now[0] = NOW + timedelta(seconds=10)
        app.dashboard.tick()
        assert tasks.get_cell("calendar-ui", "elapsed") == "12m40s"

        db = connect(cockpit_repo.state_db)
        db.execute("UPDATE jobs_state SET state='blocked', updated_at=? WHERE job='first-draft'", (ts(29),))
        db.close()
        log.append("job.blocked", job="first-draft", data={"reason": "waiting for the operator"})
        await wait_for(pilot, lambda: str(jobs.get_cell("first-draft", "state")) == "blocked")
        assert jobs.get_cell("first-draft", "elapsed") == "29m00s"
        now[0] = NOW + timedelta(minutes=5)
        app.dashboard.tick()
        assert jobs.get_cell("first-draft", "elapsed") == "29m00s"  # blocked: it does not count on


async def test_a_window_past_its_reset_says_so_instead_of_a_stale_countdown(cockpit_repo, wait_for) -> None:
    """The countdown stuck at `?`/`now` once the window reset: a blocked window past its reset waits for its
    check, and once the provider answers the window is a new one."""
    from datetime import timedelta

    from cockpit_support import NOW
    from pilothouse.core.stops import quota
    from pilothouse.tui.app import CockpitApp

    now = [NOW]
    app = CockpitApp(cockpit_repo, clock=lambda: now[0], live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.dashboard.providers
        cell = lambda key, col: str(table.get_cell(key, col))  # noqa: E731
        assert cell("sim-b\tfive_hour", "reset") == "40m00s"
        now[0] = NOW + timedelta(minutes=41)  # sim-b's five-hour window reset a minute ago
        app.dashboard.tick()
        assert cell("sim-b\tfive_hour", "reset") == "passed" and cell("sim-b\tfive_hour", "check") == "due"
        assert "100%" in cell("sim-b\tfive_hour", "used")  # still blocked until a check says otherwise
        quota.record_ok(cockpit_repo, "sim-b", "run", now=now[0])  # the check: sim-b answered
        await wait_for(pilot, lambda: cell("sim-b\tfive_hour", "used") == "new window")
        assert cell("sim-b\tfive_hour", "reset") == "—" and "?" not in cell("sim-b\tfive_hour", "used")
        now[0] = NOW + timedelta(minutes=71)  # sim's own five-hour window resets too, with no event
        app.dashboard.tick()
        assert cell("sim\tfive_hour", "used") == "new window" and cell("sim\tweekly", "used").endswith("%")


async def test_answer_while_supervisor_stopped_shows_as_waiting(cockpit_repo, make_app, wait_for) -> None:
    app = make_app(cockpit_repo, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.supervisor_alive()
        await pilot.press("4", "r")
        table = app.dashboard.problems
        await wait_for(pilot, lambda: "waiting for the supervisor" in str(table.get_cell("KTRWMB", "what")))
        assert "waiting for the supervisor" in str(table.get_cell("KTRWMB", "what"))
        assert "(stopped)" in str(table.get_cell("KTRWMB", "what"))
        assert str(table.get_cell("KTRWMB", "replies")) == "✓ retry · S starts it"
        await wait_for(pilot, lambda: any("supervisor is stopped" in n.message for n in app._notifications))
        await pilot.pause()
        assert not any(shown(app, f"problem.{r}") for r in ("retry", "accept", "skip", "hint"))
        assert "problem waiting" not in app.status_line().plain
        await pilot.press("a", "enter")  # neither a second reply nor a dialog with keys
        await pilot.pause(0.3)
        assert len(replies(cockpit_repo)) == 1
        assert "answered (retry)" in app.screen.answered_note


async def test_problems_say_the_reason_and_every_reply_and_names_fit(cockpit_repo, make_app) -> None:
    """At 80x24 the gate's command filled the cell instead of what failed, `dismiss` was cut from five
    replies; at 120 a task's name was cut."""
    from pilothouse.core.stops import problems

    blocked = problems.open_problem(cockpit_repo, "first-draft", "calendar-sync", "builder_blocked",
                                    "The builder is blocked: no compiler installed.")
    db = connect(cockpit_repo.state_db)
    db.execute("UPDATE problems SET summary=? WHERE code='KTRWMB'",
               ("Gate fast `python -m pytest -q --maxfail=1 tests/test_ui.py` failed again after the builder's "
                "retry (gate 'fast' failed: exit 1).",))
    db.close()
    app = make_app(cockpit_repo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.dashboard.problems
        assert str(table.get_cell("KTRWMB", "what")).startswith("tests/test_ui.py::test_month")  # the test first
        keys = str(table.get_cell(blocked.code, "replies"))
        assert keys.split() == ["r", "h", "s", "p", "d"]  # five replies: the keys, none cut
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        tasks = app.dashboard.tasks
        width = dict(tasks._layout)["task"]
        assert width >= len("  └ calendar-docs")  # the deepest name, whole
        assert str(app.dashboard.problems.get_cell(blocked.code, "replies")) == "retry hint skip plan dismiss"


async def test_a_problem_row_leads_with_what_tells_it_apart(weakened_problems, make_app) -> None:
    """Two weakened gates whose summaries start alike, a gate failure and a budget stop: each row's
    `what happened` starts with its own files and counts, failing test or figures, on one line."""
    app = make_app(weakened_problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.dashboard.problems
        what = {code: str(cells["what"]) for code, cells in table._rows}
        assert what["KTRWMB"].startswith("tests/test_ui.py::test_month - assert 6 == 7")
        assert what["WKUIQM"].startswith("tests/test_ui.py -3 asserts, tests/test_month.py deleted")
        assert what["WKAPZX"].startswith("tests/test_api.py skip added")
        assert what["BDGTHN"].startswith("44.5k of 40.0k tokens")
        assert len(set(w[:30] for w in what.values())) == 4


async def test_tasks_and_problems_share_the_height_by_what_they_hold(cockpit_repo, weakened_problems,
                                                                     make_app) -> None:
    """At 80x24, four problems beside five tasks: neither keeps empty rows while the other hides rows it
    holds; with fewer tasks, Problems shows all four."""

    app = make_app(weakened_problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tasks, problems = app.dashboard.tasks, app.dashboard.problems
        shown_p, shown_t = problems.size.height - 1, tasks.size.height - 1  # less the header row
        assert shown_p >= 3 and shown_t >= 3 and abs(shown_p - shown_t) <= 1
        await pilot.press("4")  # the focused panel shows all it holds
        await pilot.pause()
        assert problems.size.height - 1 == 4
    db = connect(cockpit_repo.state_db)
    with db:
        db.execute("DELETE FROM tasks WHERE task IN ('calendar-sync', 'calendar-docs', 'calendar-store')")
    db.close()
    app = make_app(weakened_problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.dashboard.problems.size.height - 1 == 4
        assert app.dashboard.tasks.size.height - 1 >= 2
