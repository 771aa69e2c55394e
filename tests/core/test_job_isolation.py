"""Jobs isolated from each other, end to end on real git with the sim: two jobs started together in
one repository, each task with its own reviewer, ship one after the other; main ends with each
job's reviewed change exactly once, no commit that failed a gate, nothing of a job that was not
accepted; a fresh clone shows both shipped and starts nothing. Also: two jobs changing the same
file (the second ship is refused, naming it), and a supervisor SIGKILLed between two ships."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.supervisor import control
from support import git, guard, until


def _plan(job: str, task: str, path: str) -> str:
    return f"""
  - match: {{mode: plan, contains: ["job: {job}"]}}
    turns:
      - say: |
          <!--RESULT-->{{"tasks":[{{"id":"{task}","title":"Write {path}","kind":"SAFE_PARALLEL","expected_paths":{{"write":["{path}"]}}}}]}}<!--/RESULT-->"""


def _build(task: str, path: str, content: str, mode: str = "code") -> str:
    return f"""
  - match: {{mode: {mode}, contains: ["task: {task}"]}}
    turns:
      - say: "Writing {path}"
        actions:
          - write: {{path: {path}, content: "{content}\\n"}}
      - say: |
          <!--RESULT-->{{"status":"complete","files_changed":["{path}"],"validation":{{"commands":[],"passed":true}},"risks":[]}}<!--/RESULT-->"""


DONE = """
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["alpha.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->"""

# alpha's first attempt fails its gate ("bad"); the retry in the same session (or a fresh resume) fixes it
TWO_JOBS = ("name: two-jobs\ndescription: two jobs at once, and one that is never accepted\nscripts:"
            + _plan("demo", "alpha", "alpha.txt") + _plan("beta", "bravo", "beta.txt")
            + _plan("gamma", "golf", "gamma.txt")
            + _build("alpha", "alpha.txt", "bad") + """
      - say: "The gate failed: fixing alpha.txt"
        actions:
          - write: {path: alpha.txt, content: "good\\n"}""" + DONE
            + _build("alpha", "alpha.txt", "good", mode="resume")
            + _build("bravo", "beta.txt", "beta") + _build("golf", "gamma.txt", "gamma") + """
  - match: {mode: review, contains: ["job: gamma"]}
    turns:
      - say: "I will not review this."
  - match: {mode: review}
    turns:
      - say: '<!--RESULT-->{"overall":"PASS","findings":[]}<!--/RESULT-->'
""")

CLASH = ("name: clash\ndescription: two jobs writing one file\nscripts:"
         + _plan("demo", "alpha", "shared.txt") + _plan("beta", "bravo", "shared.txt")
         + _build("alpha", "shared.txt", "from demo") + _build("bravo", "shared.txt", "from beta") + "\n")


def _once(layout: RepoLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(300))
    assert done.returncode == 0, done.stderr


def _repo(tmp_path: Path, cli, scenario: str, jobs: tuple[str, ...], review: str, gate: str) -> RepoLayout:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    layout = demo.prepare(tmp_path / "repo", str(path))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = review
    data["gates"] = {"fast": gate, "full": gate}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    for job in jobs:
        (tmp_path / f"{job}.md").write_text(f"Job {job}: write its file\n")
        r = cli("job", "create", job, "--request-file", str(tmp_path / f"{job}.md"), "--repo", str(layout.root))
        assert r.returncode == 0, r.stderr
    # the records are committed, as the docs say
    git(layout.root, "add", "-A")
    git(layout.root, "commit", "-qm", "quick gates; the jobs' records")
    return layout


def _states(cli, root: Path) -> dict[str, str]:
    r = cli("job", "list", "--json", "--repo", str(root))
    assert r.returncode == 0, r.stderr
    return {j["name"]: j["state"] for j in json.loads(r.stdout)}


def _events(layout: RepoLayout, kind: str) -> list[dict]:
    if not layout.events.exists():
        return []
    return [e for e in map(json.loads, layout.events.read_text().splitlines()) if e["type"] == kind]


def test_two_jobs_ship_one_after_the_other_and_a_fresh_clone_starts_nothing(tmp_path: Path, cli) -> None:
    layout = _repo(tmp_path, cli, TWO_JOBS, ("beta", "gamma"), "ai",
                   "test ! -f alpha.txt || grep -qx good alpha.txt")
    root = layout.root
    before = git(root, "rev-parse", "main")
    _once(layout)
    states = _states(cli, root)
    assert states["demo"] == states["beta"] == "accepted" and states["gamma"] == "blocked", states

    # each job on its own line, from main: neither holds the other's work, nor do its tasks
    assert git(root, "ls-tree", "--name-only", "pilothouse/integration/demo", "beta.txt") == ""
    assert git(root, "ls-tree", "--name-only", "pilothouse/integration/beta", "alpha.txt") == ""
    assert git(root, "ls-tree", "--name-only", "ph/beta/bravo", "alpha.txt") == ""
    assert git(root, "merge-base", "pilothouse/integration/demo", "pilothouse/integration/beta") == before
    # alpha's history holds the attempt that failed its gate
    attempts = git(root, "rev-list", f"{before}..ph/demo/alpha").split()
    assert "bad" in [git(root, "show", f"{c}:alpha.txt") for c in attempts]
    assert {e["task"] for e in _events(layout, "review.finished")} >= {"alpha", "bravo"}

    # a supervisor watching the repository while the first job ships, killed before the second
    pid = control.start(layout)
    r = cli("ship", "demo", "--repo", str(root), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "one commit" in r.stdout and "again" not in r.stdout  # main had not moved: the gated tree
    os.kill(pid, signal.SIGKILL)
    _gone(pid)
    gamma = cli("ship", "gamma", "--repo", str(root), timeout=60)
    assert gamma.returncode == 2 and "not accepted" in gamma.stderr
    r = cli("ship", "beta", "--repo", str(root), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "full gate passed again" in r.stdout  # main moved (demo shipped): gated again on it

    # main: each job's reviewed change exactly once, one commit each, nothing that failed a gate,
    # nothing of gamma; the records it committed say shipped; the checkout is clean
    shipped = git(root, "rev-list", "--reverse", f"{before}..main").split()
    assert [git(root, "log", "-1", "--format=%s", c) for c in shipped] == [
        "demo: textkit: three more helpers", "beta: Job beta: write its file"]
    assert all(len(git(root, "log", "-1", "--format=%P", c).split()) == 1 for c in shipped)
    assert [git(root, "show", f"{c}:alpha.txt") for c in shipped] == ["good", "good"]
    assert git(root, "show", "main:beta.txt") == "beta"
    assert git(root, "ls-tree", "--name-only", "main", "gamma.txt") == ""
    assert len(git(root, "log", "--format=%H", "main", "--", "alpha.txt").split()) == 1
    assert len(git(root, "log", "--format=%H", "main", "--", "beta.txt").split()) == 1
    message = git(root, "log", "-1", "--format=%B", shipped[0])
    assert "- alpha: Write alpha.txt (review: PASS in round 1)" in message and "job: demo" in message
    for job in ("demo", "beta"):
        record = json.loads(git(root, "show", f"main:.ai/jobs/{job}.json"))
        assert record["outcome"]["state"] == "shipped" and record["outcome"]["onto"] == "main"
    # (gamma's record changed only by its coordinator's pin, which is the operator's to commit)
    assert git(root, "status", "--porcelain", "--untracked-files=no") == "M .ai/jobs/gamma.json"
    assert _states(cli, root) == {"demo": "shipped", "beta": "shipped", "gamma": "blocked"}
    assert git(root, "branch", "--list", "ph/demo/*", "ph/beta/*", "pilothouse/integration/demo",
               "pilothouse/integration/beta") == ""
    # a supervisor started again after the kill finds nothing to do for them
    runs = len(_events(layout, "run.started"))
    _once(layout)
    assert len(_events(layout, "run.started")) == runs

    # a fresh clone: both shipped from the records alone, before and after its supervisor ran
    subprocess.run(["git", "-C", str(root), "rm", "-q", "--cached", ".ai/jobs/gamma.json"], check=True)
    git(root, "commit", "-qm", "gamma is the operator's to decide")  # its record never finished: left out
    for name, repaired in (("clone", False), ("repaired", True)):
        clone = tmp_path / name
        subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
        fresh = RepoLayout(clone)
        assert _states(cli, clone) == {"demo": "shipped", "beta": "shipped"}
        if repaired:
            # a state.db rebuilt by `maintain repair` (no event log survives a clone) takes the records' word
            r = cli("maintain", "repair", "--repo", str(clone))
            assert r.returncode == 0, r.stderr
            conn = store.connect(fresh.state_db, readonly=True)
            try:
                assert {row["job"]: row["state"] for row in conn.execute("SELECT job, state FROM jobs_state")} == {
                    "demo": "shipped", "beta": "shipped"}
            finally:
                conn.close()
        _once(fresh)
        assert _events(fresh, "run.started") == []
        assert _states(cli, clone) == {"demo": "shipped", "beta": "shipped"}
        assert git(clone, "branch", "--list", "pilothouse/*", "ph/*") == ""
        if not repaired:
            assert {e["job"] for e in _events(fresh, "job.adopted")} == {"demo", "beta"}


def _gone(pid: int) -> None:
    from pilothouse.core.dispatch import runs

    until(lambda: not runs.process_matches(pid, None), f"process {pid} is gone", every=0.02)


def test_two_jobs_changing_one_file_the_second_ship_is_refused_naming_it(tmp_path: Path, cli) -> None:
    layout = _repo(tmp_path, cli, CLASH, ("beta",), "off", "true")
    root = layout.root
    _once(layout)
    assert _states(cli, root) == {"demo": "accepted", "beta": "accepted"}
    # warned where it was cheap: at planning, the second job planned saw the first write the same file
    [warned] = _events(layout, "job.overlap")
    assert warned["data"]["paths"] == ["shared.txt"] and "refused at ship" in warned["data"]["reason"]
    assert cli("ship", "demo", "--repo", str(root), timeout=120).returncode == 0
    main = git(root, "rev-parse", "main")
    r = cli("ship", "beta", "--repo", str(root), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "job beta does not merge onto main" in r.stderr and "conflicts in shared.txt" in r.stderr
    assert git(root, "rev-parse", "main") == main and git(root, "show", "main:shared.txt") == "from demo"
    assert _states(cli, root)["beta"] == "accepted"  # nothing shipped: it can be corrected and built again
    # beta's record holds its acceptance (and its coordinator's pin), for the operator to commit
    assert git(root, "status", "--porcelain", "--untracked-files=no") == "M .ai/jobs/beta.json"
