"""`job cancel` and `job delete` on a real job: the sim's builders, real git, the real supervisor."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.stops import problems
from pilothouse.core.supervisor import control as supervisor_ctl
from support import until

THREE = """
name: three-ways
description: one task merges, one is blocked (a problem), one is still at work
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}},
          {"id":"two","title":"Two","kind":"SAFE_PARALLEL","expected_paths":{"write":["two.txt"]}},
          {"id":"three","title":"Three","kind":"SAFE_PARALLEL","expected_paths":{"write":["three.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: one"]}
    turns:
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: two"]}
    turns:
      - say: "Thinking for a long time"
        delay_s: 300
        actions:
          - write: {path: two.txt, content: "two\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["two.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: three"]}
    turns:
      - say: |
          <!--RESULT-->{"status":"blocked","files_changed":[],"validation":{"commands":[],"passed":false},"risks":[],"blocked_reason":"no compiler installed"}<!--/RESULT-->
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _tasks(layout: RepoLayout) -> dict[str, dict[str, Any]]:
    conn = store.connect(layout.state_db, readonly=True)
    try:
        return {r["task"]: dict(r) for r in conn.execute("SELECT * FROM tasks WHERE job='demo'")}
    finally:
        conn.close()


def _started_job(tmp_path: Path) -> RepoLayout:
    """The job with `one` merged, `three` stopped on a problem and `two`'s builder still at work."""
    scenario = tmp_path / "three.yaml"
    scenario.write_text(THREE)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)

    def there() -> bool:
        states = {t: r["state"] for t, r in _tasks(layout).items()} if layout.state_db.exists() else {}
        return states == {"one": "done", "two": "running", "three": "stopped"} and bool(_tasks(layout)["two"]["run_id"])

    until(there, "one done, two running, three stopped", every=0.2)
    return layout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_cancel_stops_the_runs_closes_the_problems_and_keeps_the_commits(tmp_path: Path, cli) -> None:
    layout = _started_job(tmp_path)
    try:
        run_id = _tasks(layout)["two"]["run_id"]
        conn = store.connect(layout.state_db, readonly=True)
        pid = conn.execute("SELECT pid FROM runs WHERE run_id=?", (run_id,)).fetchone()["pid"]
        conn.close()
        assert pid and _alive(pid)
        one_tip = _git(layout.root, "rev-parse", "ph/demo/one")

        r = cli("job", "cancel", "demo", "--repo", str(layout.root), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "1 run(s) stopped, 2 task(s) cancelled, 1 problem(s) closed" in r.stdout

        assert not _alive(pid)
        tasks = _tasks(layout)
        assert {t: row["state"] for t, row in tasks.items()} == {"one": "done", "two": "cancelled",
                                                                  "three": "cancelled"}
        assert problems.list_problems(layout, True, job="demo") == []
        conn = store.connect(layout.state_db, readonly=True)
        job = conn.execute("SELECT * FROM jobs_state WHERE job='demo'").fetchone()
        run = conn.execute("SELECT state FROM runs WHERE run_id=?", (run_id,)).fetchone()
        conn.close()
        assert job["state"] == "cancelled" and run["state"] == "finished"
        # the commits stay on their branches, the merge on the integration branch, the worktrees too
        assert _git(layout.root, "rev-parse", "ph/demo/one") == one_tip
        assert _git(layout.root, "show", "pilothouse/integration/demo:one.txt") == "one"
        assert Path(tasks["two"]["worktree"]).is_dir()
        # the supervisor was running before: it runs again (for other jobs), and leaves this one be
        assert supervisor_ctl.status(layout) is not None
        events = [json.loads(x) for x in layout.events.read_text().splitlines()]
        assert [e["type"] for e in events].count("job.cancelled") == 1
        again = cli("job", "cancel", "demo", "--repo", str(layout.root), timeout=60)
        assert again.returncode == 0 and "already cancelled" in again.stdout
    finally:
        supervisor_ctl.stop(layout)


def test_delete_asks_first_then_removes_worktrees_branches_and_the_record(tmp_path: Path, cli) -> None:
    layout = _started_job(tmp_path)
    try:
        worktrees = [Path(r["worktree"]) for r in _tasks(layout).values() if r["worktree"]]
        assert worktrees and any(w.is_dir() for w in worktrees)
        # no terminal to ask and no --yes: nothing is touched
        r = cli("job", "delete", "demo", "--repo", str(layout.root), input="", timeout=60)
        assert r.returncode == 2 and "pass --yes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert (layout.jobs_dir / "demo.json").exists() and _tasks(layout)["two"]["state"] == "running"

        # the operator looks at one task's work in a checkout of their own: that branch stays
        mine = tmp_path / "my-look"
        _git(layout.root, "worktree", "add", "-q", "-f", str(mine), "ph/demo/one")
        r = cli("job", "delete", "demo", "--yes", "--repo", str(layout.root), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "kept ph/demo/one" in r.stdout and mine.is_dir()
        assert not any(w.exists() for w in worktrees)
        assert _git(layout.root, "branch", "--list", "--format=%(refname:short)", "ph/demo/*") == "ph/demo/one"
        assert not (layout.jobs_dir / "demo.json").exists()
        assert _tasks(layout) == {}
        assert "demo" not in (layout.tasks_yaml.read_text() if layout.tasks_yaml.exists() else "")
        # the job's integration line goes with it (nothing was shipped); the operator's branch is untouched
        assert _git(layout.root, "branch", "--list", "pilothouse/integration/*") == ""
        assert _git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        listed = cli("job", "list", "--repo", str(layout.root))
        assert "demo" not in listed.stdout
    finally:
        supervisor_ctl.stop(layout)
