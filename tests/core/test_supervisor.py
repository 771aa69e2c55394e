"""The supervisor: one per repository, stops that leave the rest going, replies, planning paths,
`job wait` exit codes, and the task state machine."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog
from pilothouse.core.stops import answering, problems
from pilothouse.core.supervisor import control as supervisor_ctl
from pilothouse.core.supervisor.state import IllegalTransition, StateStore
from support import guard, no_bwrap_env, until

BLOCKED = """
name: blocked-builder
description: the first plan is invalid; one builder is blocked, the other finishes
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"WEIRD","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
      - say: |
          Fixed the kind.
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}},
          {"id":"two","title":"Two","kind":"SAFE_PARALLEL","expected_paths":{"write":["two.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: one"]}
    turns:
      - say: |
          The toolchain is missing here.
          <!--RESULT-->{"status":"blocked","files_changed":[],"validation":{"commands":[],"passed":false},"risks":[],"blocked_reason":"no compiler installed"}<!--/RESULT-->
  - match: {mode: code, contains: ["task: two"]}
    turns:
      - say: "Writing two.txt"
        actions:
          - write: {path: two.txt, content: "two\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["two.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _quick_project(layout: RepoLayout, **changes: object) -> None:
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data.update(changes)
    layout.project_yaml.write_text(yaml.safe_dump(data))


def _once(layout: RepoLayout) -> None:
    """The supervisor in the foreground until no job can move without the operator."""
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root), "--once"],
                          capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr


def test_stop_keeps_others_going_then_wait_exits_3_and_a_reply_finishes(tmp_path: Path, cli) -> None:
    scenario = tmp_path / "blocked.yaml"
    scenario.write_text(BLOCKED)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)
    pid = supervisor_ctl.start(layout)
    try:
        # one per repository: a second supervisor refuses, `job start` finds the running one
        second = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root)],
                                capture_output=True, text=True, timeout=guard(30))
        assert second.returncode == 2
        assert "already running" in second.stderr and f"pid {pid}" in second.stderr
        again = cli("job", "start", "--repo", str(layout.root))
        assert again.returncode == 0 and "already running" in again.stdout

        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=90)
        assert w.returncode == 3, w.stdout + w.stderr
        open_problems = problems.list_problems(layout, True, job="demo")
        assert [(p.task, p.kind) for p in open_problems] == [("one", "builder_blocked")]
        code = open_problems[0].code
        line = next(x for x in w.stdout.splitlines() if x.startswith(code))
        assert line.split("#")[0].split() == [code, *open_problems[0].replies]

        conn = store.connect(layout.state_db, readonly=True)
        states = {r["task"]: (r["state"], r["reason"]) for r in conn.execute("SELECT * FROM tasks")}
        assistants = list(conn.execute("SELECT * FROM runs WHERE role='assigner' ORDER BY started_at"))
        conn.close()
        assert states["two"][0] == "done"  # not depending on the stopped task: it went on and merged
        assert states["one"] == ("stopped", states["one"][1]) and "no compiler" in states["one"][1]
        # the invalid plan went back to the same assigner once, with the errors
        assert len(assistants) == 2 and assistants[1]["mode"] == "plan"
        spec = (layout.runtime / "runs" / f"{assistants[1]['run_id']}.task.md").read_text()
        # the assigner is told which value was wrong and what to use instead
        assert ("task 'one': kind: unknown kind 'WEIRD': use one of SAFE_PARALLEL, DEPENDENT, HOTSPOT, "
                "CONTRACT_CHANGE, DECOUPLE, TEST_ONLY, RESEARCH") in spec

        answering.act(layout, code, "skip")
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=90)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    assert supervisor_ctl.status(layout) is None
    merges = _git(layout.root, "log", "--first-parent", "--merges", "--format=%s", "pilothouse/integration/demo")
    assert merges.splitlines() == ["Merge two: Two"]


def test_operator_defined_graph_runs_with_run_once(tmp_path: Path, cli) -> None:
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks

    quick = tmp_path / "quick.yaml"
    bundled = Path(demo._data() / "scenarios" / "demo-recovery.yaml").read_text()
    quick.write_text(bundled.replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    _quick_project(layout)
    entries = [{"id": "first", "title": "First", "expected_paths": {"write": ["notes/first.txt"]}},
               {"id": "second", "title": "Second", "depends_on": ["first"], "kind": "DEPENDENT",
                "expected_paths": {"write": ["notes/second.txt"]}}]
    save_tasks(layout, validate_tasks(entries, load_project(layout), job="demo"))
    r = cli("job", "plan-ready", "demo", "--repo", str(layout.root))
    assert r.returncode == 0, r.stderr
    _once(layout)
    conn = store.connect(layout.state_db, readonly=True)
    job = conn.execute("SELECT * FROM jobs_state WHERE job='demo'").fetchone()
    roles = [r["role"] for r in conn.execute("SELECT role FROM runs")]
    conn.close()
    assert job["state"] == "accepted"
    assert "assigner" not in roles and roles.count("builder") == 2


def test_job_wait_exit_codes_from_the_store(tmp_path: Path, git_repo: Path, cli) -> None:
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.repo_setup import init_project

    init_project(git_repo, {"fast": "true", "full": "true"}, stdin_is_tty=False)
    layout = RepoLayout(git_repo)
    create_job(layout, "j1", "do a thing")
    conn = store.connect(layout.state_db)
    s = StateStore(layout, conn, EventLog(layout.events))
    s.ensure_job("j1", 1)
    s.set_job("j1", None, reason="every task was skipped", state="failed")
    assert cli("job", "wait", "j1", "--repo", str(git_repo)).returncode == 1
    s.set_job("j1", None, reason="ok", state="accepted")
    assert cli("job", "wait", "j1", "--repo", str(git_repo)).returncode == 0
    s.set_job("j1", None, reason="waiting", state="running")
    r = cli("job", "wait", "j1", "--repo", str(git_repo))
    assert r.returncode == 2 and "no supervisor is running" in r.stderr
    assert cli("job", "wait", "nope", "--repo", str(git_repo)).returncode == 2
    conn.close()


def test_state_machine_refuses_illegal_changes(git_repo: Path) -> None:
    layout = RepoLayout(git_repo)
    conn = store.connect(layout.runtime / "state.db")
    events = EventLog(layout.events)
    s = StateStore(layout, conn, events)
    s.ensure_job("j", 1)
    s.add_tasks("j", [{"id": "a", "kind": "SAFE_PARALLEL"}], 1)
    s.set_task("j", "a", "ready", "no dependencies")
    with pytest.raises(IllegalTransition):
        s.set_task("j", "a", "done", "skipping ahead")
    s.set_task("j", "a", "running", "launched")
    row = s.task("j", "a")
    assert row is not None and row["state"] == "running" and row["reason"] == "launched"
    lines = layout.events.read_text().splitlines()
    assert sum('"task.state"' in line for line in lines) == 3
    conn.close()


def test_path_conflicts() -> None:
    from types import SimpleNamespace

    from pilothouse.core.supervisor.scheduling import conflict

    sup = SimpleNamespace(project=SimpleNamespace(hotspots=["config/"]))

    def task(tid: str, write: list[str], read: list[str] = (), kind: str = "SAFE_PARALLEL") -> SimpleNamespace:  # type: ignore[assignment]
        return SimpleNamespace(id=tid, kind=kind, expected_paths=SimpleNamespace(write=write, read=list(read)))

    a = task("a", ["src/a.py"])
    assert conflict(sup, task("b", ["src/b.py"]), [a]) is None
    assert conflict(sup, task("b", ["src/"]), [a]) is a
    assert conflict(sup, task("b", ["src/*.py"]), [a]) is a
    hot = task("h", ["docs/x.md"], read=["src/a.py"], kind="HOTSPOT")
    assert conflict(sup, hot, [a]) is a  # a HOTSPOT does not even share what it reads
    cfg = task("c", ["config/app.yaml"])
    assert conflict(sup, task("d", ["docs/y.md"], read=["config/app.yaml"]), [cfg]) is cfg


SLOW_ONE = """
name: slow-one
description: one task whose builder takes a while
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Thinking hard."
        delay_s: 2
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_abort_run_stops_the_task_until_the_operator_retries(tmp_path: Path, cli) -> None:
    import json

    from pilothouse.core.state.events import EventTailer
    from pilothouse.core.stops import answering, problems

    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW_ONE)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)
    supervisor_ctl.start(layout)
    try:
        tailer = EventTailer(layout.events)
        run_id = until(lambda: next((e["run"] for e in tailer.read_new()
                                     if e["type"] == "run.started" and e["task"] == "one"), None),
                       "task one's run started")
        # abort once the worker runs (its START line), so the dispatch itself answers the signal
        from pilothouse.providers import paths

        latest = paths.logs_dir() / "latest.log"
        until(lambda: f"sim/{run_id} pid" in (latest.read_text() if latest.exists() else ""), "the worker started")
        assert supervisor_ctl.abort_run(layout, run_id) is True
        opened: list[problems.Problem] = until(lambda: problems.list_problems(layout, job="demo"),
                                               "the abort's problem opened", every=0.1)
        assert [(p.task, p.kind) for p in opened] == [("one", "operator_aborted")]  # no crash: the operator's
        assert "aborted by the operator" in opened[0].summary
        conn = store.connect(layout.state_db, readonly=True)
        assert conn.execute("SELECT count(*) FROM runs WHERE role='builder'").fetchone()[0] == 1  # no rerun
        conn.close()
        answering.act(layout, opened[0].code, "retry", who="test")
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=90)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    conn = store.connect(layout.state_db, readonly=True)
    builders = list(conn.execute("SELECT * FROM runs WHERE role='builder' ORDER BY started_at"))
    conn.close()
    assert [b["attempt"] for b in builders] == [1, 2]
    first = json.loads(builders[0]["verdict"])
    assert (first["interrupted"], first["verdict"]) == (True, "error"), first  # stopped before any text
    assert first["error"] == "interrupted: the worker was stopped on request", first
    assert supervisor_ctl.abort_run(layout, builders[1]["run_id"]) is False  # finished: nothing to abort


def test_only_news_from_others_makes_the_supervisor_look_again(git_repo: Path) -> None:
    """Its own commits and events wake the file watcher too; reconciling on each would cost a pass
    over every task per event. Another process's commit (an operator's reply) must still count."""
    from pilothouse.core.repo_setup import init_project
    from pilothouse.core.supervisor.loop import Supervisor

    init_project(git_repo, {"fast": "true", "full": "true"}, stdin_is_tty=False)
    sup = Supervisor(RepoLayout(git_repo))
    try:
        assert sup._news("fs", {"store"})  # the first look sets the baseline
        sup.events.append("supervisor.heartbeat", data={})
        sup.conn.execute("INSERT INTO meta(key, value) VALUES ('own-write', '1')")  # our own commit
        assert sup.conn.execute("SELECT value FROM meta WHERE key='own-write'").fetchone()[0] == "1"
        assert not sup._news("fs", {"store"})
        assert not sup._news("fs", {"logs"})  # a worker's log grew: activity only
        other = store.connect(RepoLayout(git_repo).state_db)
        other.execute("INSERT INTO replies(code, reply, who, at) VALUES ('ABCDEF', 'retry', 'op', 'now')")
        other.close()
        assert sup._news("fs", {"store"})
        assert sup._news("fs", {"records"}) and sup._news("done", None) and sup._news("verdict", "r")
    finally:
        sup.conn.close()


def test_a_timer_due_while_the_loop_is_busy_still_brings_a_reconcile() -> None:
    """wake_at() (a usage window's reset) must lead to a reconcile even when the timer falls due
    while the loop is reading a streaming worker's logs, whose wake-ups alone never reconcile."""
    import time

    from pilothouse.core.supervisor.loop import Supervisor

    class StreamingWaker:
        calls = 0

        def wait(self, timeout: float) -> tuple[list, list]:
            self.calls += 1
            if self.calls > 6:
                sup.stopping = True
            time.sleep(min(timeout, 0.01))
            return [], [("fs", {"logs"})]

    sup = Supervisor.__new__(Supervisor)
    sup.store_lost = lambda: False  # type: ignore[method-assign]
    sup.stopping, sup.once, sup._last_error = False, False, None
    sup._next_heartbeat = time.monotonic() + 30
    sup.activity_sent, sup.tails, sup.usage_sent = {}, {}, {}
    sup.children, sup.adopted, sup.inflight = {}, set(), set()
    sup.store = types.SimpleNamespace(moves=0)  # type: ignore[assignment]
    reconciles: list[float] = []
    sup.reconcile = lambda: reconciles.append(time.monotonic())  # type: ignore[method-assign]
    sup.heartbeat = lambda: None  # type: ignore[method-assign]
    sup.flush_activity = lambda: None  # type: ignore[method-assign]
    sup.read_logs = lambda: time.sleep(0.03)  # type: ignore[method-assign]
    sup.waker = StreamingWaker()  # type: ignore[assignment]
    due = time.monotonic() + 0.015
    sup._timer = due
    sup.loop()
    assert any(r >= due for r in reconciles), reconciles


def test_a_pass_that_moved_a_task_is_followed_by_another_at_once() -> None:
    """Our own writes wake nothing: a crashed run's task made ready again by one pass is launched by
    the next, which must come without waiting for outside news (bounded, should a record move on
    every pass)."""
    from pilothouse.core.supervisor import loop as S

    class QuietWaker:
        timeouts: list[float] = []

        def wait(self, timeout: float) -> tuple[list, list]:
            self.timeouts.append(timeout)
            if len(self.timeouts) > 20:
                sup.stopping = True
            return [], [("fs", {"logs"})]  # a worker's log line: alone, no reason to look again

    sup = S.Supervisor.__new__(S.Supervisor)
    sup.store_lost = lambda: False  # type: ignore[method-assign]
    sup.stopping, sup.once, sup._last_error, sup._timer = False, False, None, None
    sup._next_heartbeat = 1e18
    sup.store = types.SimpleNamespace(moves=0)  # type: ignore[assignment]
    passes: list[int] = []

    def reconcile() -> None:
        passes.append(1)
        if len(passes) <= 2:
            sup.store.moves += 1  # e.g. running -> ready, then ready -> running
    sup.reconcile = reconcile  # type: ignore[method-assign]
    sup.heartbeat = sup.flush_activity = sup.read_logs = lambda: None  # type: ignore[method-assign]
    sup._next_flush = lambda: 60.0  # type: ignore[method-assign]
    sup.waker = QuietWaker()  # type: ignore[assignment]
    sup.loop()
    assert len(passes) == 3  # the first, one after each pass that moved something, then quiet
    assert QuietWaker.timeouts[:2] == [0.0, 0.0] and QuietWaker.timeouts[2] == 60.0

    always = S.Supervisor.__new__(S.Supervisor)
    always.store_lost = lambda: False  # type: ignore[method-assign]
    always.__dict__.update(sup.__dict__)
    always.stopping, QuietWaker.timeouts, passes[:] = False, [], []

    def moving() -> None:
        passes.append(1)
        always.store.moves += 1
    always.reconcile = moving  # type: ignore[method-assign]
    sup = always
    always.loop()
    assert 60.0 in QuietWaker.timeouts  # never a busy loop
    assert len(passes) == S.MAX_PASSES_IN_A_ROW + 1


def test_a_failed_final_gate_waits_for_the_operator_and_retry_runs_it_again(tmp_path: Path, cli) -> None:
    """The job's last full gate fails: one problem, the job blocked, the gate not run again until `retry`."""
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks

    quick = tmp_path / "quick.yaml"
    bundled = Path(demo._data() / "scenarios" / "demo-recovery.yaml").read_text()
    quick.write_text(bundled.replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    # an ignored tally in the checkout: the two merge gates pass, the job's final gate (the third) fails
    (layout.root / ".gitignore").write_text((layout.root / ".gitignore").read_text() + ".tally\n")
    _git(layout.root, "commit", "-qam", "ignore the gate's tally")
    _quick_project(layout, gates={"fast": "true", "full": "echo x >> .tally; test $(wc -l < .tally) -ne 3"})
    entries = [{"id": "first", "title": "First", "expected_paths": {"write": ["notes/first.txt"]}},
               {"id": "second", "title": "Second", "depends_on": ["first"], "kind": "DEPENDENT",
                "expected_paths": {"write": ["notes/second.txt"]}}]
    save_tasks(layout, validate_tasks(entries, load_project(layout), job="demo"))
    assert cli("job", "plan-ready", "demo", "--repo", str(layout.root)).returncode == 0

    def full_gates() -> int:
        events = [json.loads(line) for line in layout.events.read_text().splitlines()]
        return sum(e["type"] == "gate.started" and e["data"].get("where") == "integration" for e in events)

    _once(layout)  # returns: nothing moves until the operator answers
    [problem] = problems.list_problems(layout, True, job="demo")
    assert (problem.task, problem.kind, problem.replies) == (None, "gate_failed", ["retry", "plan"])
    assert "the full gate failed on pilothouse/integration/demo" in problem.summary
    assert full_gates() == 1
    why = cli("why", "demo", "--repo", str(layout.root))  # a job's name: the job's own story
    assert why.returncode == 0, why.stderr
    assert why.stdout.startswith("demo: blocked — the full gate failed") and "tasks: 2 done" in why.stdout
    assert f"pilothouse problem act {problem.code} retry" in why.stdout and "gate.finished" in why.stdout
    # the job's full gate is a record like a task's: command, exit code, duration, its whole output kept
    from pilothouse.core.git.gates import gate_log

    [final] = [e["data"] for e in map(json.loads, layout.events.read_text().splitlines())
               if e["type"] == "gate.finished" and e["data"].get("where") == "integration"][-1:]
    assert final["command"] == "echo x >> .tally; test $(wc -l < .tally) -ne 3" and final["exit_code"] == 1
    assert final["duration_s"] is not None and "counts" in final
    assert gate_log(layout.runtime, "demo", "_job", "full").is_file()
    assert "gate full in integration FAILED exit 1 (" in why.stdout, why.stdout
    _once(layout)
    assert full_gates() == 1  # not again by itself
    answering.act(layout, problem.code, "retry")
    _once(layout)
    assert full_gates() == 2
    conn = store.connect(layout.state_db, readonly=True)
    assert conn.execute("SELECT state FROM jobs_state WHERE job='demo'").fetchone()["state"] == "accepted"
    conn.close()


PLAN_QUOTA = """
name: plan-quota
description: the assigner's first request gets HTTP 429; planning waits for the reset, then plans
scripts:
  - match: {mode: plan, contains: ["usage-limit wait"]}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"WEIRD","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: plan}
    turns:
      - error: {status: 429, retry_after_s: 3, window: five_hour, used_pct: 100}
  - match: {mode: code}
    turns:
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_an_assigner_at_its_usage_limit_waits_for_the_reset_instead_of_failing_the_plan(tmp_path: Path) -> None:
    """The sim's 429 says retry after 3 s (a 1 s window could pass before a loaded machine looks)."""
    scenario = tmp_path / "plan-quota.yaml"
    scenario.write_text(PLAN_QUOTA)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)
    _once(layout)
    assert problems.list_problems(layout, False, job="demo") == []  # no plan_invalid for a usage limit
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    waits = [e for e in events if e["type"] == "job.waiting"]
    # it waits when it looks before the window ends; a loaded machine may look only after it, and launch at once
    assert len(waits) <= 1 and all("waits for sim's usage limit until 20" in w["data"]["reason"] for w in waits)
    assigners = [e for e in events if e["type"] == "run.started" and e["data"]["role"] == "assigner"]
    # the limited run, a fresh one after the wait, and its correction round (the wait used none)
    assert [a["data"]["mode"] for a in assigners] == ["plan", "plan", "plan"]
    assert [bool(a["data"]["resume_of"]) for a in assigners] == [False, False, True]
    conn = store.connect(layout.state_db, readonly=True)
    assert conn.execute("SELECT state FROM jobs_state WHERE job='demo'").fetchone()["state"] == "accepted"
    conn.close()


UNDECLARED = """
name: undeclared
description: the builder writes a file its task did not declare (a test setting would stop it as gate_weakened)
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["docs/"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Writing"
        actions:
          - write: {path: docs/one.txt, content: "one\\n"}
          - write: {path: tools.cfg, content: "[x]\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["docs/one.txt","tools.cfg"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_files_changed_outside_the_declared_write_paths_are_named(tmp_path: Path) -> None:
    """The scheduler trusted expected_paths.write to run tasks side by side: a write outside them is
    named in an event (the gate and review still judge the work)."""
    scenario = tmp_path / "undeclared.yaml"
    scenario.write_text(UNDECLARED)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)
    _once(layout)
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    [note] = [e for e in events if e["type"] == "task.paths_exceeded"]
    assert (note["task"], note["data"]["files"], note["data"]["declared"]) == ("one", ["tools.cfg"], ["docs/"])
    assert note["data"]["reason"] == "it also changed tools.cfg, outside its expected_paths.write"


CONFLICT = """
name: conflict
description: two tasks write the same file; the second one's merge conflicts
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["a.txt"]}},
          {"id":"two","title":"Two","kind":"SAFE_PARALLEL","expected_paths":{"write":["b.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: one"]}
    turns:
      - say: "Writing"
        actions:
          - write: {path: shared.txt, content: "from one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["shared.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: two"]}
    turns:
      - say: "Writing"
        delay_s: 1
        actions:
          - write: {path: shared.txt, content: "from two\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["shared.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_retry_takes_the_operators_own_fix_through_the_gate_and_a_bad_checkout_gives_the_problem_back(
        tmp_path: Path) -> None:
    scenario = tmp_path / "conflict.yaml"
    scenario.write_text(CONFLICT)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)

    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    # "two" waits a second before writing, so "one" merges first, but a loaded machine may reorder them
    assert p.kind == "merge_conflict" and p.task in ("one", "two")
    loser = p.task
    wt = Path(p.evidence["worktree"])
    # a checkout that is not the task's branch: the answer is given back, with why, and nothing moves
    _git(wt, "checkout", "-q", "--detach")
    answering.act(layout, p.code, "retry")
    _once(layout)
    [again] = problems.list_problems(layout, True, job="demo")
    assert again.code != p.code and again.kind == "merge_conflict" and again.replies == p.replies
    assert "your retry could not be applied: the worktree" in again.summary and "detached HEAD" in again.summary
    # the operator resolves the conflict and commits it themselves: the fix is gated, then merged
    _git(wt, "checkout", "-q", f"ph/demo/{loser}")
    subprocess.run(["git", "merge", "-q", "pilothouse/integration/demo"], cwd=wt, capture_output=True)
    (wt / "shared.txt").write_text("from one\nfrom two\n")
    _git(wt, "commit", "-qam", "operator: both lines")
    answering.act(layout, again.code, "retry")
    _once(layout)
    assert problems.list_problems(layout, True, job="demo") == []
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    moves = [e["data"]["to"] for e in events if e["type"] == "task.state" and e["task"] == loser]
    assert moves[-4:] == ["gating", "approved", "merging", "done"]  # the hand-made commit passed the gate
    assert _git(layout.root, "show", "pilothouse/integration/demo:shared.txt") == "from one\nfrom two"


def test_no_git_identity_is_one_line_setup_failure_and_retry_commits_the_builders_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git explains a missing author in a dozen lines; the problem says it in one, as the repo's setup."""
    scenario = tmp_path / "undeclared.yaml"
    scenario.write_text(UNDECLARED)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout)
    for key in ("user.name", "user.email"):
        subprocess.run(["git", "config", "--unset", key], cwd=layout.root)  # set here or only in HOME
    _git(layout.root, "config", "user.useConfigOnly", "true")  # never guess one from the host
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var, raising=False)
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    assert (p.task, p.kind) == ("one", "setup_failed") and "\n" not in p.summary
    assert "git has no author identity here" in p.summary and "git config user.email" in p.summary

    # the operator sets an identity and answers retry: the builder's work is committed as it is,
    # gated and merged, with no second builder run on top of it
    _git(layout.root, "config", "user.name", "Operator")
    _git(layout.root, "config", "user.email", "op@example.invalid")
    answering.act(layout, p.code, "retry")
    _once(layout)
    assert problems.list_problems(layout, True, job="demo") == []
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    builders = [e for e in events if e["type"] == "run.started" and e["task"] == "one"]
    assert len(builders) == 1, builders
    moves = [e["data"]["to"] for e in events if e["type"] == "task.state" and e["task"] == "one"]
    assert moves[-4:] == ["gating", "approved", "merging", "done"], moves
    subject = _git(layout.root, "log", "-1", "--format=%s", "ph/demo/one")
    assert subject == "one: One"
    assert _git(layout.root, "show", "pilothouse/integration/demo:docs/one.txt") == "one"


def test_a_crashed_assigner_is_tried_once_more_then_the_problem_says_why(tmp_path: Path) -> None:
    layout = demo.prepare(tmp_path / "repo", "demo")
    _quick_project(layout, sim_scenario=str(tmp_path / "missing.yaml"))
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    assert (p.task, p.kind, p.replies) == (None, "worker_crashed", ["retry", "plan"])
    assert "missing.yaml not found" in p.summary and "(twice)" in p.summary
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    assert sum(e["type"] == "run.started" and e["data"]["role"] == "assigner" for e in events) == 2


def test_job_start_without_bubblewrap_refuses_before_launching_anything(tmp_path: Path, cli) -> None:
    layout = demo.prepare(tmp_path / "repo")
    try:
        r = cli("job", "start", "demo", "--repo", str(layout.root), env=no_bwrap_env(tmp_path))
    finally:
        supervisor_ctl.stop(layout)  # only if one started: the refusal is the point
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "refusing to start" in r.stderr and "apt-get install bubblewrap" in r.stderr
    assert "confinement: off" in r.stderr
    assert not layout.events.exists() or "run.started" not in layout.events.read_text()
    w = cli("run", "--watch", "--once", "--repo", str(layout.root), env=no_bwrap_env(tmp_path))
    assert w.returncode == 2 and "refusing to start" in w.stderr


def test_a_log_full_of_hostile_lines_does_not_stop_a_supervisor_and_is_reported(tmp_path: Path, cli) -> None:
    from tests.core.test_events import HOSTILE

    quick = tmp_path / "quick.yaml"
    bundled = Path(demo._data() / "scenarios" / "demo-recovery.yaml").read_text()
    quick.write_text(bundled.replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    _quick_project(layout)
    layout.events.parent.mkdir(parents=True, exist_ok=True)
    with open(layout.events, "ab") as fh:
        fh.write(b"\n".join(HOSTILE) + b"\n")  # the last one is the seq scan's first look
    started = cli("job", "start", "--repo", str(layout.root))
    try:
        assert started.returncode == 0, started.stderr
        assert f"{len(HOSTILE)} line(s) that are not events" in started.stderr
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    from pilothouse.core.state.events import EventTailer

    announced = [e for e in EventTailer(layout.events).read_new() if e["type"] == "supervisor.started"]
    assert announced[0]["data"]["skipped_lines"] == len(HOSTILE)
    assert f"skipped {len(HOSTILE)} lines" in layout.supervisor_log.read_text()


def test_job_wait_on_an_empty_store_says_no_supervisor_instead_of_no_such_table(git_repo: Path, cli) -> None:
    """A disk that filled up as the store was being made leaves an empty state.db."""
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.repo_setup import init_project

    init_project(git_repo, {"fast": "true", "full": "true"}, stdin_is_tty=False)
    layout = RepoLayout(git_repo)
    create_job(layout, "j1", "do a thing")
    layout.runtime.mkdir(parents=True, exist_ok=True)
    layout.state_db.write_bytes(b"")
    r = cli("job", "wait", "j1", "--repo", str(git_repo), timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "no supervisor is running" in r.stderr


def test_a_pass_over_a_big_job_reads_the_full_rows_only_of_tasks_that_can_move(git_repo: Path) -> None:
    """A 500-task job's pass built a full row of every task, twice, on every wake: the supervisor's
    cost per task grew with the job. Tasks waiting for their dependencies cost one narrow scan."""
    import sqlite3

    from pilothouse.core.supervisor import flow
    from pilothouse.core.supervisor.state import stop_task

    layout, entries, sup = _chain_job(git_repo, 300)
    try:
        stop_task(sup.store, "big", "t0", "the operator's to look at", kind="builder_blocked")
        full_rows: list[str] = []

        def counting(cursor: sqlite3.Cursor, values: tuple) -> sqlite3.Row:
            row = sqlite3.Row(cursor, values)
            if "counters" in row.keys():  # a task's full row
                full_rows.append(row["task"])
            return row

        sup.conn.row_factory = counting
        assert flow.step_job(sup, "big", True) == []
        assert len(full_rows) <= 2, full_rows[:10]
        assert sup.store.job("big")["state"] == "blocked"  # the pass still saw every task: t0 waits for the operator
    finally:
        sup.conn.close()


def test_a_later_pass_readies_a_dependent_from_sqlite_alone_and_still_sees_a_definition_gone(git_repo: Path) -> None:
    """After its first pass over a job, the supervisor asks SQLite for the tasks that can move (live
    ones, and planned ones whose dependencies are all done): a dependent still becomes ready once its
    dependency is done, the waiting ones cost no row, and a tasks.yaml that drops a task makes the
    next pass look at every planned task again (the dropped one is to be re-planned)."""
    import sqlite3

    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks
    from pilothouse.core.supervisor import flow

    layout, entries, sup = _chain_job(git_repo, 100)
    try:
        flow.step_job(sup, "big", False)  # the first pass: every planned task looked at once
        assert sup.store.task("big", "t0")["state"] == "ready"
        sup.conn.execute("UPDATE tasks SET state='done' WHERE job='big' AND task IN ('t0', 't1')")
        full_rows: list[str] = []

        def counting(cursor: sqlite3.Cursor, values: tuple) -> sqlite3.Row:
            row = sqlite3.Row(cursor, values)
            if "counters" in row.keys():
                full_rows.append(row["task"])
            return row

        sup.conn.row_factory = counting
        flow.step_job(sup, "big", False)
        sup.conn.row_factory = sqlite3.Row
        assert set(full_rows) == {"t2"}, full_rows[:10]
        assert sup.store.task("big", "t2")["state"] == "ready"
        assert sup.store.task("big", "t3")["state"] == "planned"

        # t50 leaves the plan (its dependents with it): the next pass sends it back to planning
        kept = [e for e in entries if int(e["id"][1:]) < 50]
        save_tasks(layout, validate_tasks(kept, load_project(layout), job="big"), replace_job="big")
        flow.step_job(sup, "big", False)
        assert sup.store.task("big", "t50")["state"] == "needs_replan"
        assert sup.store.task("big", "t10")["state"] == "planned"
    finally:
        sup.conn.close()


def _chain_job(git_repo: Path, n: int) -> tuple[RepoLayout, list[dict], Any]:
    """A job "big" of one chain of `n` tasks, planned into the store of a Supervisor (not running)."""
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks
    from pilothouse.core.repo_setup import init_project
    from pilothouse.core.supervisor.loop import Supervisor

    init_project(git_repo, {"fast": "true", "full": "true"}, stdin_is_tty=False)
    layout = RepoLayout(git_repo)
    create_job(layout, "big", "a long chain")
    entries = [{"id": f"t{k}", "title": f"T{k}", "kind": "DEPENDENT" if k else "SAFE_PARALLEL",
                "depends_on": [f"t{k - 1}"] if k else [], "expected_paths": {"write": [f"out/t{k}.txt"]}}
               for k in range(n)]
    save_tasks(layout, validate_tasks(entries, load_project(layout), job="big"))
    sup = Supervisor(layout)
    sup.store.ensure_job("big", 1)
    sup.store.add_tasks("big", entries, 1)
    return layout, entries, sup
