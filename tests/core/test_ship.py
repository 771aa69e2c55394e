"""`pilothouse ship` on real git with a sim job: one commit for the job (the gated tree, or gated
again when the base moved), one per task, the whole history, a branch for a pull request, the
refusal over uncommitted changes, the job shipped and released; and the next job starting from the
base branch's new head."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from support import guard

TWO = """
name: two-tasks
description: two independent tasks, each writing one file; a third for a second job
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}},
          {"id":"two","title":"Two","kind":"SAFE_PARALLEL","expected_paths":{"write":["two.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: one"]}
    turns:
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: two"]}
    turns:
      - say: "Writing two.txt"
        actions:
          - write: {path: two.txt, content: "two\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["two.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code, contains: ["task: three"]}
    turns:
      - say: "Writing three.txt next to the operator's fix"
        actions:
          - bash: {command: "test -f FIX.md && cp FIX.md three.txt"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["three.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _once(layout: RepoLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr


def _accepted(tmp_path: Path) -> RepoLayout:
    scenario = tmp_path / "two.yaml"
    scenario.write_text(TWO)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    _git(layout.root, "commit", "-qam", "quick gates")
    _once(layout)
    assert _job_state(layout, "demo") == "accepted"
    return layout


def _job_state(layout: RepoLayout, job: str) -> str:
    conn = store.connect(layout.state_db, readonly=True)
    try:
        return str(conn.execute("SELECT state FROM jobs_state WHERE job=?", (job,)).fetchone()["state"])
    finally:
        conn.close()


def _ship(cli, layout: RepoLayout, *extra: str):
    return cli("ship", "demo", *extra, "--repo", str(layout.root), timeout=60)


def _tree(root: Path, ref: str) -> str:
    return _git(root, "rev-parse", f"{ref}^{{tree}}")


def test_ship_lands_one_commit_for_the_job_per_task_or_history_and_refuses_over_uncommitted_changes(
        tmp_path: Path, cli) -> None:
    layout = _accepted(tmp_path)
    root = layout.root
    head = _git(root, "rev-parse", "pilothouse/integration/demo")
    main = _git(root, "rev-parse", "main")

    # --branch: a new branch for a pull request, one commit holding exactly the gated tree; the base
    # branch and the checkout stay as they are
    r = _ship(cli, layout, "--branch", "pr/demo")
    assert r.returncode == 0, r.stderr
    assert _git(root, "rev-parse", "pr/demo~1") == main and _tree(root, "pr/demo") == _tree(root, head)
    message = _git(root, "log", "-1", "--format=%B", "pr/demo")
    assert message.startswith("demo: ") and "job: demo" in message and f"reviewed: {head}" in message
    assert "- one: One (review: no review (workflow.review: off" in message and "- two: Two" in message
    assert "git push -u origin pr/demo" in r.stdout and not (root / "one.txt").exists()
    assert _git(root, "rev-parse", "main") == main
    taken = _ship(cli, layout, "--branch", "pr/demo")
    assert taken.returncode == 2 and "exists already" in taken.stderr

    # --per-task: one commit per task, on top of main, each named for its task
    r = _ship(cli, layout, "--per-task", "--branch", "pr/tasks")
    assert r.returncode == 0, r.stderr
    subjects = _git(root, "log", "--format=%s", "main..pr/tasks").splitlines()
    assert sorted(subjects) == ["one: One", "two: Two"]
    assert _git(root, "rev-list", "--merges", "--count", "main..pr/tasks") == "0"
    assert _git(root, "rev-parse", "pr/tasks~2") == main and _tree(root, "pr/tasks") == _tree(root, head)
    # --history: the line itself (its merge commits and every attempt)
    r = _ship(cli, layout, "--history", "--branch", "pr/history")
    assert r.returncode == 0, r.stderr
    assert _git(root, "rev-parse", "pr/history") == head
    both = cli("ship", "demo", "--per-task", "--history", "--repo", str(root))
    assert both.returncode == 2 and "not allowed with" in both.stderr

    # git itself refuses (another git holds the ref's lock): one line, no traceback
    lock = root / ".git" / "refs" / "heads" / "pr" / "locked.lock"
    lock.write_text("")
    r = _ship(cli, layout, "--branch", "pr/locked")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "git branch failed" in r.stderr and "locked.lock" in r.stderr

    # the operator moved main on meanwhile, and has an edit in a file the job writes: refused
    (root / "OTHER.md").write_text("operator\n")
    _git(root, "add", "OTHER.md")
    _git(root, "commit", "-qm", "operator work")
    main = _git(root, "rev-parse", "main")
    (root / "one.txt").write_text("my own draft\n")
    (root / "NOTES.txt").write_text("unrelated, uncommitted\n")
    r = _ship(cli, layout)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "uncommitted changes in one.txt" in r.stderr and "commit or stash" in r.stderr
    assert _git(root, "rev-parse", "main") == main and (root / "one.txt").read_text() == "my own draft\n"

    # without the clash: one commit on main (the base moved on: its full gate ran again); the
    # unrelated edit stays where it was
    (root / "one.txt").unlink()
    r = _ship(cli, layout)
    assert r.returncode == 0, r.stderr
    assert "one commit" in r.stdout and "full gate passed again" in r.stdout
    # the records `job create` wrote were never committed: the line names each one git does not know
    loose = _git(root, "ls-files", "--others", "--exclude-standard", "--", ".ai").split()
    assert ".ai/jobs/demo.json" in loose and f"(git add {' '.join(sorted(loose))} && git commit)" in r.stdout
    assert _git(root, "log", "-1", "--format=%P", "main").split() == [main]
    assert _git(root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (root / "one.txt").read_text() == "one\n" and (root / "two.txt").read_text() == "two\n"
    assert (root / "NOTES.txt").read_text() == "unrelated, uncommitted\n"
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == ""
    events = [json.loads(x) for x in layout.events.read_text().splitlines()]
    assert [e["data"]["mode"] for e in events if e["type"] == "job.shipped"] == [
        "one commit", "per task", "fast-forward", "one commit"]
    # shipped: the state says so, its branches and worktrees are released
    assert _job_state(layout, "demo") == "shipped"
    listed = cli("job", "list", "--repo", str(root))
    assert "shipped" in listed.stdout, listed.stdout
    assert _git(root, "branch", "--list", "ph/demo/*", "pilothouse/integration/*") == ""
    assert "ph/demo" not in _git(root, "worktree", "list")
    again = _ship(cli, layout)
    assert again.returncode == 0 and "already on main" in again.stdout


def test_ship_lands_the_gated_tree_and_the_next_job_starts_from_the_new_head(tmp_path: Path, cli) -> None:
    layout = _accepted(tmp_path)
    root = layout.root
    head = _git(root, "rev-parse", "pilothouse/integration/demo")
    main = _git(root, "rev-parse", "main")
    r = _ship(cli, layout, "--json")
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["mode"] == "one commit" and done["regated"] is False and done["new"] == _git(root, "rev-parse", "main")
    assert _git(root, "rev-parse", "main~1") == main and _tree(root, "main") == _tree(root, head)
    assert (root / "one.txt").exists()

    # a fix lands on main after the job; the next job must see it (its line starts from main)
    (root / "FIX.md").write_text("the fix\n")
    _git(root, "add", "FIX.md")
    _git(root, "commit", "-qm", "fix on main")
    (tmp_path / "req.md").write_text("Write three.txt\n")
    assert cli("job", "create", "second", "--request-file", str(tmp_path / "req.md"), "--repo", str(root)).returncode == 0
    (tmp_path / "t.yaml").write_text("- id: three\n  title: Three\n  expected_paths: {write: [three.txt]}\n")
    r = cli("task", "define", "--file", str(tmp_path / "t.yaml"), "--job", "second", "--repo", str(root))
    assert r.returncode == 0, r.stderr
    assert cli("job", "plan-ready", "second", "--repo", str(root)).returncode == 0
    _once(layout)
    assert _job_state(layout, "second") == "accepted"
    assert _git(root, "show", "ph/second/three:three.txt") == "the fix"
    assert _git(root, "merge-base", "--is-ancestor", "main", "pilothouse/integration/second") == ""
