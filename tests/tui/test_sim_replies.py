"""Each reply, by keystroke in the cockpit, on a real sim job stopped on a real problem.

The sim jobs (`pilothouse demo --scenario S --follow`, exit 3 = waiting for the operator) all start
at once, in parallel, when the module's first test needs them. Each test then opens the cockpit on
its job, answers with the reply's key, and checks three things: the reply is in the `replies`
table, a problem.answered event is in the log, and the running supervisor acted on it (consumed
the reply, moved the problem on, changed the task or the job) — which the cockpit then draws.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.store import connect
from support import guard

pytestmark = pytest.mark.anyio

# reply -> the bundled scenario whose problem takes it
SCENARIOS = {"retry": "gate-fails-twice", "hint": "review-rejects", "accept": "accept", "skip": "skip",
             "plan": "replan", "dismiss": "skip"}
WORDS = {"hint": "keep short words lower-case", "plan": "vendor a tiny slugify instead"}


def _env(base: Path) -> dict[str, str]:
    """What tests/conftest.py's isolated_home does, for processes that outlive one test."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
                                     "[init]\n\tdefaultBranch = main\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "XDG_", "PILOTHOUSE_"))}
    env.update(HOME=str(home), PILOTHOUSE_HOME=str(base / "pilothouse"), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local/share"), XDG_STATE_HOME=str(home / ".local/state"),
               XDG_CACHE_HOME=str(home / ".cache"))
    return env


@pytest.fixture(scope="module")
def sim_jobs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    base = tmp_path_factory.mktemp("simjobs")
    env = _env(base)
    # start, in parallel, only the jobs of the tests selected in this session
    wanted = {item.callspec.params["reply"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")}

    def launch(reply: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "pilothouse", "demo", "--scenario", SCENARIOS[reply],
                                 "--dir", str(base / reply), "--follow"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    procs = {reply: launch(reply) for reply in SCENARIOS if reply in wanted}
    jobs: dict[str, Any] = {}

    def get(reply: str) -> RepoLayout:
        if reply not in procs:
            procs[reply] = launch(reply)
        if reply not in jobs:
            out, _ = procs[reply].communicate(timeout=guard(420))
            assert procs[reply].returncode == 3, f"{SCENARIOS[reply]} did not stop for the operator:\n{out}"
            jobs[reply] = RepoLayout(base / reply)
        return jobs[reply]

    yield get
    for reply, proc in procs.items():
        if proc.poll() is None:
            proc.kill()
        subprocess.run([sys.executable, "-m", "pilothouse", "job", "stop"], cwd=base / reply, env=env,
                       capture_output=True, timeout=guard(60))


def _rows(layout: RepoLayout, sql: str, *params: Any) -> list[Any]:
    db = connect(layout.state_db, readonly=True)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def _events(layout: RepoLayout) -> list[dict[str, Any]]:
    return [json.loads(line) for line in layout.events.read_text().splitlines() if line.strip()]


@pytest.fixture
def wait_for(wait_for: Any) -> Any:
    """The shared helper with this module's longer default (real supervisor processes) and a calmer step."""
    return functools.partial(wait_for, timeout=40.0, step=0.1)


async def _answer(layout: RepoLayout, reply: str, wait_for: Any) -> None:
    from pilothouse.tui.app import CockpitApp

    problem = _rows(layout, "SELECT code, task, kind FROM problems WHERE state='open'")[0]
    code = problem["code"]
    app = CockpitApp(layout, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: code in app.dashboard.problems.problems)
        await pilot.press("4")
        app.dashboard.problems.select_key(code)
        key = {"retry": "r", "accept": "a", "skip": "s", "dismiss": "d", "hint": "h", "plan": "p"}[reply]
        await pilot.press(key)
        if reply in WORDS:
            await wait_for(pilot, lambda: type(app.screen).__name__ == "WordsModal"
                           and app.focused is not None and app.focused.screen is app.screen)
            await pilot.press(*WORDS[reply], "ctrl+s")
        if reply in ("skip", "accept"):  # these merge or cancel work: they ask first
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
            await pilot.press("y")
        await wait_for(pilot, lambda: _rows(layout, "SELECT * FROM replies WHERE code=?", code))
        got = _rows(layout, "SELECT reply, words, who FROM replies WHERE code=?", code)[0]
        assert (got["reply"], got["words"]) == (reply, WORDS.get(reply))
        assert got["who"].endswith("@cockpit")
        answered = [e for e in _events(layout) if e["type"] == "problem.answered" and e["data"]["code"] == code]
        assert answered and answered[0]["data"]["reply"] == reply
        # the supervisor acts: consumes the reply, the problem leaves `open`, the work moves on
        await wait_for(pilot, lambda: _rows(layout, "SELECT consumed_at FROM replies WHERE code=?", code)[0][0],
                       timeout=guard(180))
        acted = ("task.state", "job.started", "job.planned", "problem.closed", "run.started")
        await wait_for(pilot, lambda: any(e["type"] in acted for e in _events(layout)
                                          if e["seq"] > answered[0]["seq"]), timeout=60)
        # and the cockpit draws it from the event log: the problem is gone from the open list
        await wait_for(pilot, lambda: code not in app.dashboard.problems.problems, timeout=30)


# retry, skip and hint always run; the other three are the `slow` part (deselect with -m "not slow")
REPLIES = [pytest.param(r, marks=[pytest.mark.slow] if r in ("accept", "plan", "dismiss") else [])
           for r in SCENARIOS]


@pytest.mark.parametrize("reply", REPLIES)
async def test_reply_by_key_on_a_sim_job(sim_jobs, wait_for, reply: str) -> None:
    await _answer(sim_jobs(reply), reply, wait_for)


async def test_supervisor_stop_and_start_by_key(sim_jobs, wait_for) -> None:
    from pilothouse.core.supervisor import control as supervisor_ctl
    from pilothouse.tui.app import CockpitApp

    layout = sim_jobs("skip")  # its demo left the supervisor running
    app = CockpitApp(layout, live=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "running pid" in app.status_line().plain)
        await pilot.press("S")  # running: asks first, then stops it
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmModal")
        await pilot.press("y")
        await wait_for(pilot, lambda: supervisor_ctl.status(layout) is None, timeout=60)
        await wait_for(pilot, lambda: "stopped" in app.status_line().plain)
        await pilot.press("S")  # stopped: starts one
        await wait_for(pilot, lambda: supervisor_ctl.status(layout) is not None, timeout=60)
        await wait_for(pilot, lambda: "running pid" in app.status_line().plain)
