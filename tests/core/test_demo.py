"""`pilothouse demo --follow` runs the main job end to end on the simulator."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support import no_bwrap_env


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_demo_follow_accepts_the_job(tmp_path: Path, cli) -> None:
    dest = tmp_path / "scratch"
    r = cli("demo", "--follow", "--dir", str(dest), timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.splitlines()[0] == f"scratch repository: {dest.resolve()}"
    assert "job.accepted" in r.stdout

    # each task's merge commit is on the integration branch, with the task branch's tip as second parent
    merges = _git(dest, "log", "--first-parent", "--merges", "--format=%H %P %s", "pilothouse/integration/demo")
    tasks = ("add-slugify", "add-wordcount", "add-titlecase", "export-api")
    for task in tasks:
        tip = _git(dest, "rev-parse", f"ph/demo/{task}")
        assert sum(1 for line in merges.splitlines() if line.split()[2] == tip) == 1, task
    assert len(merges.splitlines()) == len(tasks)

    # the full gate passes on the integration branch, in a checkout of its own
    check = tmp_path / "check"
    _git(dest, "worktree", "add", "-q", "--detach", str(check), "pilothouse/integration/demo")
    project = (dest / ".ai" / "project.yaml").read_text()
    gate = next(line.split(":", 1)[1].strip().strip("'\"") for line in project.splitlines()
                if line.strip().startswith("full:"))
    done = subprocess.run(gate, shell=True, cwd=check, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 passed" in done.stdout

    # the operator's branch and checkout are untouched
    assert _git(dest, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert len(_git(dest, "log", "--format=%H", "main").splitlines()) == 2
    assert _git(dest, "status", "--porcelain", "--untracked-files=no") == ""

    # the review sent findings back once, and the builder's own session fixed them
    events = [json.loads(line) for line in (dest / ".ai/runtime/events.jsonl").read_text().splitlines()]
    reviews = [(e["task"], e["data"]["round"], e["data"]["overall"]) for e in events if e["type"] == "review.finished"]
    assert ("add-titlecase", 1, "CHANGES") in reviews and ("add-titlecase", 2, "PASS") in reviews
    resumed = [e for e in events if e["type"] == "run.started" and e["data"]["mode"] == "resume"]
    assert [e["task"] for e in resumed] == ["add-titlecase"]
    assert resumed[0]["data"]["resume_of"]
    planned = next(e for e in events if e["type"] == "job.planned")
    assert planned["data"]["edges"]["export-api"] == ["add-slugify", "add-wordcount", "add-titlecase"]

    # job wait on a finished job answers at once
    w = cli("job", "wait", "demo", "--repo", str(dest), timeout=30)
    assert w.returncode == 0, w.stdout + w.stderr


def test_demo_list_names_the_scenarios(cli) -> None:
    r = cli("demo", "--list")
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    assert "demo" in names and "demo-recovery" in names


def test_demo_refuses_a_non_empty_dir(tmp_path: Path, cli) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("hi")
    r = cli("demo", "--follow", "--dir", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "not empty" in r.stderr and "Traceback" not in r.stderr


def test_demo_without_bubblewrap_runs_unconfined_and_says_so_in_one_line(tmp_path: Path, cli) -> None:
    dest = tmp_path / "scratch"
    try:
        r = cli("demo", "--follow", "--dir", str(dest), timeout=240, env=no_bwrap_env(tmp_path))
    finally:
        if (dest / ".ai").exists():  # a demo that waits for the operator keeps its supervisor
            cli("job", "stop", "--repo", str(dest), timeout=30)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = [line for line in r.stdout.splitlines() if line.startswith("running unconfined")]
    assert len(said) == 1 and "apt-get install bubblewrap" in said[0], r.stdout[:2000]
    assert "job.accepted" in r.stdout and "worker_crashed" not in r.stdout
    assert "confinement: 'off'" in (dest / ".ai" / "project.yaml").read_text() or \
        "confinement: off" in (dest / ".ai" / "project.yaml").read_text()

