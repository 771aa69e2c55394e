"""A supervisor killed with SIGKILL mid-build, mid-gate and mid-merge, and started again, finishes
the job with every task merged exactly once and no task run twice for one attempt."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from support import Events, git, guard, until


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    until(lambda: not runs.process_matches(pid, None), f"process {pid} is gone", every=0.02)


def _wait_merged_not_gated(layout: RepoLayout, before: str) -> None:
    """Until git has merged (the integration branch moved) while the merge's gate still runs."""
    from pilothouse.core.git.worktrees import worktree_root

    pending = worktree_root(layout) / "integration-demo.pending.json"
    until(lambda: pending.exists() and git(layout.root, "rev-parse", "pilothouse/integration/demo") != before,
          "the merge reached its gate", every=0.02)


def _slow_project(layout: RepoLayout) -> None:
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    # slow enough to be caught in the middle; the merge runs the full gate
    data["gates"] = {"fast": "sleep 1.5 && test -s notes/first.txt", "full": "sleep 1.5 && test -s notes/first.txt"}
    layout.project_yaml.write_text(yaml.safe_dump(data))


def test_sigkill_during_build_gate_and_merge(tmp_path: Path) -> None:
    layout = demo.prepare(tmp_path / "repo", "demo-recovery")
    _slow_project(layout)
    operator_head = git(layout.root, "rev-parse", "main")
    ev = Events(layout)
    pid = supervisor_ctl.start(layout)
    try:
        # 1. during the build: the builder's dispatch must survive and be adopted
        started = ev.wait(lambda e: e["type"] == "run.started" and e["task"] == "first")
        _kill(pid)
        builder = started["data"]["pid"]
        assert runs.process_matches(builder, started["data"]["pid_start"]), "the dispatch died with the supervisor"
        pid = supervisor_ctl.start(layout)
        # 2. during the task's gate
        ev.wait(lambda e: e["type"] == "gate.started" and e["task"] == "first")
        time.sleep(0.3)
        _kill(pid)
        pid = supervisor_ctl.start(layout)
        # 3. during the merge (its full gate runs after git merged)
        ev.wait(lambda e: e["type"] == "task.state" and e["task"] == "first" and e["data"]["to"] == "merging")
        _wait_merged_not_gated(layout, before=git(layout.root, "rev-parse", "pilothouse/integration/demo"))
        _kill(pid)
        pid = supervisor_ctl.start(layout)
        ev.wait(lambda e: e["type"] == "job.accepted", timeout=90)
    finally:
        supervisor_ctl.stop(layout)

    conn = store.connect(layout.state_db, readonly=True)
    tasks = {r["task"]: r for r in conn.execute("SELECT * FROM tasks")}
    builder_runs = list(conn.execute("SELECT task, attempt, count(*) AS n FROM runs WHERE role='builder'"
                                     " GROUP BY task, attempt"))
    conn.close()
    assert {t: r["state"] for t, r in tasks.items()} == {"first": "done", "second": "done"}
    assert all(r["n"] == 1 for r in builder_runs), [dict(r) for r in builder_runs]
    assert {r["task"] for r in builder_runs} == {"first", "second"}
    # every task branch is merged exactly once on the integration branch's first-parent line
    merges = git(layout.root, "log", "--first-parent", "--merges", "--format=%H %P", "pilothouse/integration/demo")
    for task in ("first", "second"):
        tip = git(layout.root, "rev-parse", f"ph/demo/{task}")
        assert sum(1 for line in merges.splitlines() if line.split()[2:] == [tip]) == 1, task
        assert git(layout.root, "rev-parse", "pilothouse/integration/demo") != tip
    assert git(layout.root, "rev-parse", "main") == operator_head
    # each kill landed where it was meant to: the gate ran again, the half-done merge was rolled back
    gates = [e for e in ev.seen if e["type"] == "gate.started" and e["task"] == "first"]
    assert len(gates) == 2
    assert "reset: moving to" in git(layout.root, "reflog", "show", "pilothouse/integration/demo")
    # the adoption is on record
    types = [e["type"] for e in ev.seen]
    assert types.count("supervisor.started") == 4
    log = layout.supervisor_log.read_text()
    assert "adopted run" in log


def test_unspawned_launch_is_spawned_once_on_restart(tmp_path: Path) -> None:
    """A launch recorded but never spawned (killed in between) is spawned by the next supervisor, once."""
    from pilothouse.core.supervisor import launch as L
    from pilothouse.core.supervisor.loop import Supervisor

    layout = demo.prepare(tmp_path / "repo", "demo-recovery")
    sup = Supervisor(layout)
    sup.acquire()
    try:
        launch = runs.Launch(run_id=runs.new_run_id(), job="demo", task=None, role="assigner", provider="sim",
                             mode="plan", workdir=str(layout.root), task_text="job: demo\n", attempt=1,
                             scenario="demo-recovery")
        runs.write_spec(layout, launch)
        sup.store._txn([runs.record_sql(launch)])  # recorded, then "killed" before spawning
    finally:
        sup.release()
    sup2 = Supervisor(layout)
    sup2.acquire()
    try:
        sup2.recover()
        assert set(sup2.children) == {launch.run_id}
        proc = sup2.children[launch.run_id]
        proc.wait(timeout=guard(60))
        sup2.collect(launch.run_id)
        row = sup2.store.run(launch.run_id)
        assert row is not None and row["state"] == "finished"
        assert json.loads(row["verdict"])["verdict"] == "completed"
        assert L.verdict_of(row)["result"]["tasks"]
    finally:
        sup2.release()
    conn = store.connect(layout.state_db, readonly=True)
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    conn.close()


KILLED_WITH_ITS_KEY = """
name: killed-with-its-key
description: the builder prints its credential into its session, then thinks for a long while
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Checking my credential"
        actions:
          - bash: {command: "cat \\"$HOME/../credential\\""}
      - say: "Thinking it over"
        delay_s: 60
      - say: |
          <!--RESULT-->{"status":"blocked","files_changed":[],"validation":{"commands":[],"passed":false},"risks":[],"blocked_reason":"done thinking"}<!--/RESULT-->
"""


def test_a_dispatch_killed_before_it_scrubbed_its_run_folder_is_scrubbed_by_the_supervisor(
        tmp_path: Path, cli) -> None:
    from pilothouse.providers import paths

    key = "sk-canary-killed-1a2b3c4d5e6f"
    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=key + "\n").returncode == 0
    scenario = tmp_path / "killed.yaml"
    scenario.write_text(KILLED_WITH_ITS_KEY)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    layout.project_yaml.write_text(yaml.safe_dump(data))
    events = Events(layout)
    supervisor_ctl.start(layout)
    try:
        started = events.wait(lambda e: e["type"] == "run.started" and e["data"]["role"] == "builder")
        conv = paths.providers_dir() / "sim" / "runs" / started["run"] / "state" / "conversation.json"
        until(lambda: conv.exists() and key in conv.read_text(errors="replace"),
              "the builder put its key into its session", every=0.1)
        _kill(started["data"]["pid"])  # the dispatch dies mid-run: it never scrubs
        events.wait(lambda e: e["type"] == "run.finished" and e.get("run") == started["run"])
    finally:
        supervisor_ctl.stop(layout)
    assert key not in conv.read_text(errors="replace")
    for f in conv.parent.parent.rglob("*"):
        if f.is_file() and not f.is_symlink():
            assert key.encode() not in f.read_bytes(), f
