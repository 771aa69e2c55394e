"""A hand fix is tried where the gate runs (`pilothouse gate TASK`: the task's worktree, confined,
with the shared folders) and taken by `retry` the same way for every task stop: committed, gated,
merged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.stops import answering, problems
from pilothouse.core.stops.replies import KIND_REPLIES
from support import guard

NOTHING = """
name: nothing
description: the builder says it is done but writes nothing
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":[],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _once(root: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(root), "--once"],
                          capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr


def test_gate_task_tries_a_hand_fix_in_the_worktree_and_retry_takes_it_through_the_gate(tmp_path: Path,
                                                                                        cli) -> None:
    scenario = tmp_path / "nothing.yaml"
    scenario.write_text(NOTHING)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "test -f one.txt && echo 'ok 1 one.txt' && echo '1..1'", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    _once(layout.root)
    [p] = problems.list_problems(layout, True, job="demo")
    assert p.kind == "no_changes" and "retry" in p.replies
    r = cli("gate", "one", "--repo", str(layout.root))
    assert r.returncode == 1 and "gate fast in " in r.stdout and "FAILED" in r.stdout, (r.stdout, r.stderr)
    wt = Path(json.loads(cli("gate", "one", "--json", "--repo", str(layout.root)).stdout)["worktree"])
    (wt / "one.txt").write_text("by hand\n")
    r = cli("gate", "one", "--repo", str(layout.root))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "passed — 1 tests: 1 passed, 0 failed, 0 skipped (tap)" in r.stdout and f"problem act {p.code} retry" in r.stdout
    assert (wt / "one.txt").read_text() == "by hand\n"  # the gate commits nothing and keeps the edit
    answering.act(layout, p.code, "retry")
    _once(layout.root)
    assert problems.list_problems(layout, True, job="demo") == []
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    moves = [e["data"]["to"] for e in events if e["type"] == "task.state" and e["task"] == "one"]
    assert moves[-4:] == ["gating", "approved", "merging", "done"], moves  # the fix, not a second builder
    shown = subprocess.run(["git", "show", "pilothouse/integration/demo:one.txt"], cwd=layout.root,
                           capture_output=True, text=True)
    assert shown.stdout == "by hand\n"


def test_every_stop_that_says_fix_it_by_hand_takes_retry() -> None:
    for kind in ("gate_failed", "no_changes", "unchanged_resubmission", "gate_weakened", "merge_conflict",
                 "merge_failed", "secret_found"):
        assert "retry" in KIND_REPLIES[kind], kind


def test_gate_of_an_unknown_task_is_one_line_with_the_fix(git_repo: Path, cli) -> None:
    assert cli("init", "--no-prove", "--gate-fast", "true", cwd=git_repo).returncode == 0
    r = cli("gate", "nope", cwd=git_repo)
    assert r.returncode != 0 and "no job has run" in r.stderr and "Traceback" not in r.stderr
