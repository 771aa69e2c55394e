"""Deterministic cockpit state: a real state.db and events.jsonl written through core.store and
core.events (with a fixed clock), real run logs under logs_dir(), a real git repository."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cockpit_support import NOW, RUN_API, RUN_REVIEW, RUN_STORE, RUN_UI, T0, frozen_clock, ts  # noqa: F401
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import events as core_events
from pilothouse.core.state.events import EventLog
from pilothouse.core.state.store import connect

TASKS = [
    # task, state, kind, deps, attempt, provider, model, run, activity, tokens, reason, started, updated
    ("calendar-store", "done", "CONTRACT_CHANGE", [], 1, "sim", "sim-coder", RUN_STORE, None, 9120, None, 2, 11),
    ("calendar-api", "running", "SAFE_PARALLEL", ["calendar-store"], 1, "sim", "sim-coder", RUN_API,
     "edit src/api.py", 15300, None, 12, 29),
    ("calendar-ui", "stopped", "SAFE_PARALLEL", ["calendar-store"], 2, "sim", "sim-coder", RUN_UI, None, 20100,
     "gate fast failed twice", 15, 27),
    ("calendar-sync", "waiting", "SAFE_PARALLEL", [], 0, "sim-b", "sim-fast", None, None, 0,
     "quota: sim-b five_hour resets in 40m", None, 20),
    ("calendar-docs", "planned", "TEST_ONLY", ["calendar-api", "calendar-ui"], 0, None, None, None, None, 0,
     None, None, 1),
]


PROJECT_YAML = "gates:\n  fast: python -m pytest -q\n  full: python -m pytest -q\n"


def build_state(root: Path) -> RepoLayout:
    """A repository mid-job: one task running, one stopped on a problem, one waiting on quota."""
    root.mkdir(parents=True, exist_ok=True)
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    layout = RepoLayout(root)
    layout.ai.mkdir(parents=True, exist_ok=True)  # a repository mid-job was set up by `pilothouse init`
    layout.project_yaml.write_text(PROJECT_YAML)
    db = connect(layout.state_db)
    with db:
        db.execute("INSERT INTO jobs_state VALUES ('hello-world','accepted',1,1,'sim/sim-coder',12000,NULL,?,?,?)",
                   (ts(-60), ts(-20), ts(-20)))
        db.execute("INSERT INTO jobs_state VALUES ('first-draft','running',2,2,'sim/sim-coder',44520,NULL,?,?,NULL)",
                   (ts(0), ts(29)))
        for (task, state, kind, deps, attempt, prov, model, run, act, tok, reason, started, updated) in TASKS:
            db.execute(
                "INSERT INTO tasks (job, task, state, kind, depends_on, attempt, provider, model, run_id, activity,"
                " tokens, reason, started_at, updated_at) VALUES ('first-draft',?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (task, state, kind, json.dumps(deps), attempt, prov, model, run, act, tok, reason,
                 ts(started) if started is not None else None, ts(updated)))
        db.execute("INSERT INTO tasks (job, task, state, kind, attempt, provider, model, tokens, started_at,"
                   " updated_at) VALUES ('hello-world','greet','done','SAFE_PARALLEL',1,'sim','sim-coder',12000,?,?)",
                   (ts(-55), ts(-25)))
        review = {"verdict": "completed", "result": {"overall": "CHANGES", "findings": [
            {"severity": "minor", "file_line": "src/store.py:14", "summary": "close the file handle",
             "suggested_fix": "use with"}]}}
        for run_id, task, role, mode, state, tokens, start, end, verdict in (
                (RUN_STORE, "calendar-store", "builder", "code", "finished", 9120, 2, 7, {"verdict": "completed"}),
                (RUN_REVIEW, "calendar-store", "reviewer", "review", "finished", 2100, 8, 10, review),
                (RUN_UI, "calendar-ui", "builder", "code", "finished", 20100, 15, 26, {"verdict": "completed"}),
                (RUN_API, "calendar-api", "builder", "code", "running", 15300, 12, None, None)):
            db.execute("INSERT INTO runs (run_id, job, task, role, provider, model, mode, attempt, state, verdict,"
                       " tokens, started_at, finished_at) VALUES (?,?,?,?,?,?,?,1,?,?,?,?,?)",
                       (run_id, "first-draft", task, role, "sim", "sim-coder", mode, state,
                        json.dumps(verdict) if verdict else None, tokens, ts(start),
                        ts(end) if end is not None else None))
        evidence = {"gate": "fast", "command": "python -m pytest -q",
                    "gate_output": "F.\nFAILED tests/test_ui.py::test_month - assert 6 == 7\n1 failed, 1 passed",
                    "log": str(Path.home() / ".pilothouse/state/logs/sim" / f"{RUN_UI}.jsonl")}
        db.execute("INSERT INTO problems VALUES ('KTRWMB','first-draft','calendar-ui','gate_failed',?,?,?,'open',?,"
                   "NULL,NULL,NULL)",
                   ("The fast gate failed twice after the builder's fix: the month view renders 6 columns, "
                    "the test expects 7.", json.dumps(evidence), json.dumps(["retry", "accept", "skip", "hint"]),
                    ts(27)))
        for prov, window, pct, resets, blocked, check in (
                ("sim", "five_hour", 42.0, ts(100), 0, ts(35)), ("sim", "weekly", 12.5, ts(60 * 24 * 3), 0, None),
                ("sim-b", "five_hour", 100.0, ts(70), 1, ts(70))):
            db.execute("INSERT INTO quota_windows VALUES (?,?,?,?,?,?,'http-429',?,0)",
                       (prov, window, pct, resets, blocked, ts(20), check))
        db.execute("INSERT INTO supervisor VALUES (1, 999999, NULL, ?, ?, ?)", (ts(0), ts(29), ts(29.5)))
    db.close()
    _write_events(layout)
    _write_run_log(RUN_API)
    return layout


def _write_events(layout: RepoLayout) -> None:
    minutes = itertools.count()
    clock = iter(ts(m / 2) for m in minutes)
    original = core_events.utc_now_iso
    core_events.utc_now_iso = lambda: next(clock)  # type: ignore[assignment]
    try:
        log = EventLog(layout.events)
        j = "first-draft"
        log.append("supervisor.started", data={"pid": 999999})
        log.append("job.started", job=j, data={"revision": 2})
        log.append("job.planned", job=j, data={"revision": 2, "tasks": 5})
        for task, *_ in TASKS:
            log.append("task.defined", job=j, task=task)
        log.append("run.started", job=j, task="calendar-store", run=RUN_STORE, data={"role": "builder"})
        log.append("task.state", job=j, task="calendar-store", data={"from": "ready", "to": "running"})
        log.append("gate.finished", job=j, task="calendar-store", data={"gate": "fast", "exit_code": 0,
                                                                       "passed": True})
        log.append("merge.finished", job=j, task="calendar-store", data={"sha": "4be1c0d"})
        log.append("task.state", job=j, task="calendar-store", data={"from": "merging", "to": "done"})
        log.append("run.started", job=j, task="calendar-api", run=RUN_API, data={"role": "builder"})
        log.append("task.state", job=j, task="calendar-api", data={"from": "ready", "to": "running"})
        log.append("quota.changed", data={"provider": "sim-b", "window": "five_hour", "used_pct": 100})
        log.append("task.state", job=j, task="calendar-sync", data={"from": "ready", "to": "waiting",
                                                                   "reason": "quota"})
        log.append("run.finished", job=j, task="calendar-ui", run=RUN_UI, data={"verdict": "completed"})
        log.append("gate.finished", job=j, task="calendar-ui", data={
            "gate": "fast", "command": "python -m pytest -q", "exit_code": 1, "passed": False,
            "output_tail": "F.\nFAILED tests/test_ui.py::test_month - assert 6 == 7\n1 failed, 1 passed"})
        log.append("task.state", job=j, task="calendar-ui", data={"from": "gating", "to": "stopped",
                                                                 "reason": "gate fast failed twice"})
        log.append("problem.opened", job=j, task="calendar-ui", data={"code": "KTRWMB", "kind": "gate_failed"})
        log.append("run.activity", job=j, task="calendar-api", run=RUN_API, data={"activity": "edit src/api.py"})
    finally:
        core_events.utc_now_iso = original  # type: ignore[assignment]


def _write_run_log(run_id: str) -> None:
    from pilothouse.providers.paths import logs_dir

    path = logs_dir() / "sim" / f"{run_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = [
        {"kind": "session", "id": "sess-api-1"},
        {"kind": "text", "text": "Reading the store "}, {"kind": "text", "text": "contract first."},
        {"kind": "tool", "name": "read", "status": "started", "brief": "src/store.py"},
        {"kind": "tool", "name": "read", "status": "ok", "brief": "src/store.py"},
        {"kind": "usage", "input": 1200, "output": 85},
        {"kind": "tool", "name": "write", "status": "ok", "brief": "src/api.py"},
        {"kind": "tool", "name": "bash", "status": "error", "brief": "python -m pytest -q (exit 1)"},
        {"kind": "usage", "input": 1800, "output": 240},
        {"kind": "text", "text": "One test fails; fixing the route."},
        {"kind": "tool", "name": "edit", "status": "started", "brief": "src/api.py"},
    ]
    with open(path, "w") as fh:
        for n, line in enumerate(lines):
            fh.write(json.dumps({"ts": ts(12 + n), **line}) + "\n")


@pytest.fixture
def cockpit_repo(monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> RepoLayout:
    # run logs under HOME, so the detail screen's (tilde-shortened) paths are the same every run
    monkeypatch.setenv("PILOTHOUSE_HOME", str(isolated_home / ".pilothouse"))
    return build_state(isolated_home / "projects" / "calendar")


@pytest.fixture
def demo_repo(isolated_home: Path) -> RepoLayout:
    """The demo job's recorded log (tests/tui/demo_log.py) in a repository whose store knows the job."""
    from demo_log import demo_layout

    return demo_layout(isolated_home / "projects" / "textkit")


@pytest.fixture
def ui_worktree(cockpit_repo: RepoLayout, tmp_path: Path) -> Path:
    """calendar-ui gets a real worktree on its own branch, one commit ahead of its base (`columns = 7`)."""
    from support import git

    root = cockpit_repo.root
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "ui.py").write_text("columns = 6\n")
    git(root, "add", "src")  # the code only: the store and the event log are no part of the base
    git(root, "commit", "-qm", "base")
    base = git(root, "rev-parse", "HEAD")
    wt = tmp_path / "wt-ui"
    git(root, "worktree", "add", "-q", "-b", "ph/first-draft/calendar-ui", str(wt), base)
    (wt / "src" / "ui.py").write_text("columns = 7\n")
    git(wt, "commit", "-qam", "seven columns")
    db = connect(cockpit_repo.state_db)
    db.execute("UPDATE tasks SET worktree=?, branch='ph/first-draft/calendar-ui', counters=? "
               "WHERE task='calendar-ui'", (str(wt), json.dumps({"base": base})))
    db.close()
    return wt


@pytest.fixture
def make_app() -> Callable[..., Any]:
    from pilothouse.tui.app import CockpitApp

    def make(layout: RepoLayout, live: bool = False, **kw: Any) -> CockpitApp:
        return CockpitApp(layout, clock=frozen_clock, live=live, **kw)

    return make


async def wait_until(pilot: Any, predicate: Callable[[], Any], timeout: float = 30.0, step: float = 0.05) -> None:
    """Let the app run until `predicate()` holds; fail after `timeout` seconds of wall-clock time, raised
    to the suite's guard (support.GUARD_S): the verdict is whether it came, not how fast on a busy machine."""
    from support import guard

    deadline = time.monotonic() + guard(timeout)
    while True:
        crashed = getattr(pilot.app, "_exception", None)
        if crashed is not None:  # the app died: show why, not what the predicate trips over after
            raise AssertionError(f"the cockpit stopped on {type(crashed).__name__}: {crashed}") from crashed
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(step)


async def wait_until_input(pilot: Any, screen_name: str) -> None:
    """Keys typed before a dialog has focus would land on the dashboard (and mean something there)."""
    app = pilot.app
    await wait_until(pilot, lambda: type(app.screen).__name__ == screen_name and app.focused is not None
                     and app.focused.screen is app.screen)


@pytest.fixture
def wait_for() -> Callable[..., Awaitable[None]]:
    return wait_until


@pytest.fixture
def wait_for_input() -> Callable[[Any, str], Awaitable[None]]:
    return wait_until_input


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


WEAKENED_UI = {"level": "fast", "command": "python -m pytest -q", "weakened": [
    {"kind": "assertions_removed", "path": "tests/test_ui.py", "detail": "3 assertion line(s) fewer"},
    {"kind": "test_deleted", "path": "tests/test_month.py", "detail": "deleted"}]}
WEAKENED_API = {"level": "fast", "command": "python -m pytest -q", "weakened": [
    {"kind": "skip_added", "path": "tests/test_api.py", "detail": "@pytest.mark.skip(reason='flaky')"}]}


@pytest.fixture
def weakened_problems(cockpit_repo: RepoLayout) -> RepoLayout:
    """Beside KTRWMB, two gate_weakened problems whose summaries start alike (only the files and the
    counts tell them apart) and a job-level budget stop: four open problems."""
    rows = [
        ("WKUIQM", "calendar-ui", "gate_weakened", "The gate passed, but the work weakened it: assertions removed "
         "(tests/test_ui.py: 3 assertion line(s) fewer); test deleted (tests/test_month.py: deleted).",
         WEAKENED_UI, ["hint", "accept", "skip", "plan"], 28),
        ("WKAPZX", "calendar-api", "gate_weakened", "The gate passed, but the work weakened it: skip added "
         "(tests/test_api.py: @pytest.mark.skip(reason='flaky')).", WEAKENED_API,
         ["hint", "accept", "skip", "plan"], 28.5),
        ("BDGTHN", None, "budget", "Job first-draft has used 44,520 tokens, past its budget of 40000 "
         "(budgets.job_tokens): nothing new launches; the work so far is kept.",
         {"used_tokens": 44520, "cap": 40000, "file": ".ai/project.yaml", "field": "budgets.job_tokens"},
         ["retry"], 29)]
    db = connect(cockpit_repo.state_db)
    with db:
        for code, task, kind, summary, evidence, replies, at in rows:
            db.execute("INSERT INTO problems VALUES (?,'first-draft',?,?,?,?,?,'open',?,NULL,NULL,NULL)",
                       (code, task, kind, summary, json.dumps(evidence), json.dumps(replies), ts(at)))
    db.close()
    return cockpit_repo
