"""Bad input through the real CLI: one line naming the file or field and the fix, exit 2, no
traceback, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog
from pilothouse.providers.errors import UserError
from support import guard


@pytest.fixture
def repo(git_repo: Path, cli) -> Path:
    r = cli("init", "--gate-fast", "true", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    (git_repo / "req.md").write_text("do a thing\n")
    r = cli("job", "create", "demo", "--request-file", "req.md", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    return git_repo


def one_line_error(r, *words: str) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    # one line, or argparse's: its usage, then the one line that says what is wrong
    message = lines[-1]
    assert len(lines) == 1 or (lines[0].startswith("usage: ") and ": error: " in message), r.stderr
    for w in words:
        assert w in message, r.stderr
    return r.stderr


def test_task_define_file_not_utf8_or_a_directory(repo: Path, cli) -> None:
    (repo / "latin1.yaml").write_bytes(b"tasks:\n- id: a\n  title: caf\xe9\n")
    (repo / "utf16.yaml").write_text("tasks:\n- id: a\n  title: t\n", encoding="utf-16")
    (repo / "adir").mkdir()
    for name in ("latin1.yaml", "utf16.yaml"):
        one_line_error(cli("task", "define", "--file", name, "--job", "demo", cwd=repo),
                       f"--file {name}: not UTF-8 text (byte ", "): save it as UTF-8")
    one_line_error(cli("task", "define", "--file", "adir", "--job", "demo", cwd=repo),
                   "--file adir: is a directory, not a regular file")
    assert not (repo / ".ai/tasks.yaml").exists()


def test_project_yaml_not_utf8_or_a_directory(repo: Path, cli) -> None:
    py = repo / ".ai/project.yaml"
    good = py.read_bytes()
    py.write_bytes(good + b"# caf\xe9\n")
    one_line_error(cli("job", "start", cwd=repo), "project.yaml: not UTF-8 text")
    one_line_error(cli("run", "--watch", "--once", cwd=repo, timeout=30), "project.yaml: not UTF-8 text")
    py.unlink()
    py.mkdir()
    one_line_error(cli("job", "start", cwd=repo), "project.yaml: is a directory")


def test_repo_that_is_a_file(repo: Path, tmp_path: Path, cli) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    one_line_error(cli("task", "define", "--file", "x.yaml", "--repo", str(f)), f"{f}: not a directory: pass the repository's directory")
    one_line_error(cli("job", "list", "--repo", str(tmp_path / "nope")), "no such directory")


def test_init_checks_everything_before_writing(git_repo: Path, cli) -> None:
    (git_repo / ".gitignore").mkdir()
    one_line_error(cli("init", "--gate-fast", "true", cwd=git_repo), ".gitignore is a directory: remove it")
    assert not (git_repo / ".ai").exists()
    repos_file = list(Path(__import__("os").environ["PILOTHOUSE_HOME"]).rglob("repos.json"))
    assert all(str(git_repo) not in p.read_text() for p in repos_file)


def test_endless_input_is_refused_without_reading_it_all(repo: Path, cli) -> None:
    one_line_error(cli("job", "create", "z1", "--request-file", "/dev/zero", cwd=repo, timeout=20),
                   "--request-file /dev/zero", "character device")
    one_line_error(cli("task", "define", "--file", "/dev/zero", "--job", "demo", cwd=repo, timeout=20),
                   "--file /dev/zero", "character device")
    assert not (repo / ".ai/jobs/z1.json").exists()


@pytest.mark.parametrize("tid", ["a..b", "x.lock", "9."])
def test_task_ids_must_fit_in_a_branch_name(tid: str) -> None:
    from pilothouse.core.records.project import ProjectConfig
    from pilothouse.core.records.taskgraph import TaskGraphError, validate_tasks

    project = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}})
    with pytest.raises(TaskGraphError) as exc:
        validate_tasks([{"id": tid, "title": "t"}], project, job="j")
    assert f"task '{tid}': id cannot be part of a git branch name" in str(exc.value)
    assert "rename it" in str(exc.value)
    assert validate_tasks([{"id": "a.b-c_d", "title": "t"}], project, job="j")[0].id == "a.b-c_d"


def test_tasks_defined_after_the_plan_are_refused(repo: Path, cli) -> None:
    from pilothouse.core.state import store
    from pilothouse.core.supervisor.state import StateStore

    (repo / "t.yaml").write_text("tasks:\n- id: a\n  title: A\n")
    assert cli("task", "define", "--file", "t.yaml", "--job", "demo", cwd=repo).returncode == 0
    assert cli("job", "plan-ready", "demo", cwd=repo).returncode == 0
    layout = RepoLayout(repo)
    conn = store.connect(layout.state_db)
    try:
        s = StateStore(layout, conn, EventLog(layout.events))
        s.ensure_job("demo", 1)
        s.set_job("demo", None, reason="planned by the operator", state="running", planned_revision=1)
    finally:
        conn.close()
    (repo / "late.yaml").write_text("tasks:\n- id: late\n  title: Late\n")
    want = ("job demo is already planned (revision 1)", "pilothouse job update demo --request-file F")
    one_line_error(cli("task", "define", "--file", "late.yaml", "--job", "demo", cwd=repo), *want)
    one_line_error(cli("job", "plan-ready", "demo", cwd=repo), *want)
    assert "late" not in (repo / ".ai/tasks.yaml").read_text()


def test_tasks_defined_while_the_assigner_plans_are_refused(repo: Path, cli) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.state import store
    from pilothouse.core.supervisor.state import StateStore

    layout = RepoLayout(repo)
    conn = store.connect(layout.state_db)
    try:
        s = StateStore(layout, conn, EventLog(layout.events))
        s.ensure_job("demo", 1)
        s.set_job("demo", None, reason="planning revision 1", state="planning")
        launch = runs.Launch(run_id="plan-1", job="demo", task=None, role="assigner", provider="sim", mode="plan",
                             workdir=str(repo), task_text="plan", attempt=1)
        conn.execute(*runs.record_sql(launch))
    finally:
        conn.close()
    (repo / "late.yaml").write_text("tasks:\n- id: late\n  title: Late\n")
    one_line_error(cli("task", "define", "--file", "late.yaml", "--job", "demo", cwd=repo),
                   "job demo is being planned by the assigner now", "pilothouse job update demo")
    assert not (repo / ".ai/tasks.yaml").exists() or "late" not in (repo / ".ai/tasks.yaml").read_text()


def test_max_workers_below_one_is_refused_before_anything_is_written(repo: Path, tmp_path: Path, cli) -> None:
    for n in ("0", "-1"):
        one_line_error(cli("job", "start", "--max-workers", n, cwd=repo), "--max-workers", "at least 1")
        one_line_error(cli("run", "--watch", "--max-workers", n, cwd=repo), "--max-workers", "at least 1")
    scratch = tmp_path / "scratch"
    one_line_error(cli("demo", "--max-workers", "-5", "--dir", str(scratch)), "--max-workers", "at least 1")
    assert not scratch.exists()
    assert not (repo / ".ai/runtime/supervisor.log").exists()


def test_job_wait_timeout(repo: Path, cli) -> None:
    one_line_error(cli("job", "wait", "demo", "--timeout", "-3", cwd=repo), "--timeout", "0 or more")
    r = cli("job", "wait", "demo", "--timeout", "0", cwd=repo)
    assert r.returncode == 124, r.stdout + r.stderr
    assert "still running after 0s" in r.stderr
    helptext = cli("job", "wait", "--help").stdout
    assert "124 timed out" in " ".join(helptext.split())
    assert "2 usage error or no supervisor" in " ".join(helptext.split())


def test_events_and_live_for_unknown_tasks_and_jobs(repo: Path, cli) -> None:
    log = EventLog(RepoLayout(repo).events)
    log.append("task.state", job="demo", task="a", data={"from": None, "to": "planned"})
    one_line_error(cli("events", "--task", "nosuch", cwd=repo), "no events for task 'nosuch'")
    one_line_error(cli("events", "--job", "nosuch", cwd=repo), "no job named 'nosuch'")
    one_line_error(cli("live", "--job", "nosuch", cwd=repo), "no job named 'nosuch'")
    assert cli("events", "--task", "a", cwd=repo).returncode == 0
    r = cli("live", "--job", "demo", "--type", "gate.", cwd=repo)
    assert r.returncode == 0 and "no events for job demo" in r.stderr, r.stderr


def test_demo_lists_and_runs_only_job_scenarios(tmp_path: Path, cli) -> None:
    listed = [line.split()[0] for line in cli("demo", "--list").stdout.splitlines() if line.strip()]
    assert "demo" in listed and "garbage" not in listed and "slow" not in listed
    d = tmp_path / "d"
    r = cli("demo", "--scenario", "garbage", "--dir", str(d))
    one_line_error(r, "scenario 'garbage'", "mode plan")
    r = cli("demo", "--scenario", "nope", "--dir", str(d))
    one_line_error(r, "no scenario named 'nope'")
    assert "scratch repository" not in r.stdout and not d.exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    r = cli("demo", "--dir", str(full))
    one_line_error(r, "is not empty")
    assert "scratch repository" not in r.stdout


def test_job_name_length_is_named() -> None:
    from pilothouse.core.records.jobs import validate_name

    with pytest.raises(UserError, match="70 characters: the limit is 63"):
        validate_name("a" * 70)
    assert validate_name("a" * 63) == "a" * 63


def test_supervisor_shown_in_status_and_start_says_what_it_did_not_apply(repo: Path, cli) -> None:
    r = cli("job", "status", cwd=repo)
    assert "supervisor: not running (start it: pilothouse job start)" in r.stdout
    assert json.loads(cli("job", "status", "demo", "--json", cwd=repo).stdout)["supervisor"]["running"] is False
    assert cli("job", "start", "--max-workers", "2", cwd=repo, timeout=60).returncode == 0
    try:
        again = cli("job", "start", "--max-workers", "4", cwd=repo)
        assert again.returncode == 0 and "already running" in again.stdout
        assert "--max-workers 4 not applied" in again.stderr and "job stop" in again.stderr
        same = cli("job", "start", "--max-workers", "2", cwd=repo)
        assert same.returncode == 0 and "not applied" not in same.stderr
        st = json.loads(cli("job", "status", "demo", "--json", cwd=repo).stdout)["supervisor"]
        assert st["running"] is True and isinstance(st["pid"], int)
        assert f"supervisor: pid {st['pid']}" in cli("job", "status", cwd=repo).stdout
        assert json.loads(cli("status", "--json", cwd=repo).stdout)["supervisor"]["pid"] == st["pid"]
    finally:
        cli("job", "stop", cwd=repo, timeout=60)


_DISK_DRIVER = r"""
import json, os, shutil, subprocess, sys
repo, mnt, mode = sys.argv[1], sys.argv[2], sys.argv[3]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
work = os.path.join(mnt, "repo")
shutil.copytree(repo, work, symlinks=True)
if mode == "full":
    with open(os.path.join(mnt, "fill"), "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
else:
    subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
out = {}
for name, argv in (("create", ["job", "create", "j2", "--request-file", "req.md"]),
                   ("define", ["task", "define", "--file", "t.yaml", "--job", "demo"])):
    r = subprocess.run([sys.executable, "-m", "pilothouse", *argv], cwd=work, capture_output=True, text=True,
                       timeout=900)
    out[name] = [r.returncode, r.stderr]
out["left"] = sorted(os.path.relpath(os.path.join(d, f), work) for d, _, fs in os.walk(os.path.join(work, ".ai"))
                     for f in fs if f.endswith(".tmp") or f.startswith(".") or f == "j2.json")
print(json.dumps(out))
"""


@pytest.mark.parametrize(("mode", "words"), [("full", "no space left on the device"),
                                             ("readonly", "the file system is read-only")])
def test_a_full_or_read_only_disk_is_one_line_naming_the_path(repo: Path, tmp_path: Path, mode: str,
                                                              words: str) -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no user and mount namespaces here to make a small tmpfs in")
    (repo / "t.yaml").write_text("tasks:\n- id: a\n  title: A\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["unshare", "-rm", sys.executable, "-c", _DISK_DRIVER, str(repo), str(mnt), mode],
                       capture_output=True, text=True, timeout=guard(120))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for name in ("create", "define"):
        rc, err = out[name]
        assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert words in err and str(mnt / "repo" / ".ai") in err, err
    assert out["left"] == []  # nothing half-written


def _hostile_project(py: Path, kind: str) -> None:
    import os

    py.unlink()
    if kind == "fifo":
        os.mkfifo(py)
    elif kind == "dev-zero":
        py.symlink_to("/dev/zero")
    elif kind == "latin1":
        py.write_bytes(b"gates: {fast: caf\xe9, full: x}\n")
    elif kind == "deep":
        py.write_text("gates: " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "duplicate":
        py.write_text("gates: {fast: a, full: b}\ngates: {fast: c, full: d}\n")
    elif kind == "laughs":
        py.write_text("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)))
    elif kind == "huge":
        py.write_text("# " + "x" * (5 << 20) + "\n")
    elif kind == "list":
        py.write_text("- gates\n- fast\n")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "latin1", "deep", "duplicate", "laughs", "huge", "list"])
def test_a_hostile_project_yaml_is_one_line_for_every_command(repo: Path, cli, kind: str) -> None:
    """The measured table: each command on each hostile project.yaml ends at once (no hang) with
    exit 0, or 2 and one line naming the file — never a traceback."""
    (repo / "t.yaml").write_text("tasks:\n- id: a\n  title: A\n")
    _hostile_project(repo / ".ai/project.yaml", kind)
    for argv in (("check",), ("job", "start"), ("job", "status"), ("task", "define", "--file", "t.yaml",
                                                                  "--job", "demo"), ("run", "--watch", "--once"),
                 ("why", "demo")):
        r = cli(*argv, cwd=repo, timeout=30)
        assert "Traceback" not in r.stderr, (argv, r.stderr)
        assert r.returncode in (0, 2), (argv, r.returncode, r.stderr)
        if r.returncode == 2:
            assert len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)
    assert not (repo / ".ai/runtime/supervisor.log").exists()


def test_output_into_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    """`pilothouse … | head`: the reader went away; exit 0 with nothing on stderr, no traceback
    (a closed pipe is an OSError, and the disk-error handling must not take it)."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "pilothouse", "view", "--keys", "--json"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=guard(60))
    finally:
        os.close(write_end)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
