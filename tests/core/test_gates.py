"""Gates: real commands in a real worktree."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from pilothouse.core.git import checkout as co
from pilothouse.core.git import worktrees as wt
from pilothouse.core.git.gates import run_command, run_gate, run_setup
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers import paths
from support import git

PY = sys.executable


def project(confinement: str = "on", **gates: str) -> ProjectConfig:
    return ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true", **gates},
                                         "confinement": confinement})


def test_passing_gate_runs_real_tests(git_repo: Path) -> None:
    res = run_gate(project(full=f"{PY} -m pytest -q -p no:cacheprovider"), "full", git_repo)
    assert res.passed and res.exit_code == 0 and res.reason is None, res
    assert "1 passed" in res.output_tail
    assert git(git_repo, "status", "--porcelain") == ""


def test_failing_gate(git_repo: Path) -> None:
    res = run_gate(project(fast=f"{PY} -c \"import sys; print('boom'); sys.exit(3)\""), "fast", git_repo)
    assert not res.passed and res.exit_code == 3 and "boom" in res.output_tail
    assert res.reason == "gate 'fast' failed: exit 3"


def test_gate_that_edits_files_fails_and_is_restored(git_repo: Path) -> None:
    (git_repo / "notes.txt").write_text("operator's own untracked file\n")
    cmd = f"{PY} -c \"open('src/calc.py','a').write('# fixed\\n'); open('new.txt','w').write('x')\""
    res = run_gate(project(fast=cmd), "fast", git_repo)
    assert not res.passed and res.exit_code == 0
    assert res.changed_files == ["new.txt", "src/calc.py"]
    assert "must not edit the tree" in (res.reason or "")
    assert git(git_repo, "status", "--porcelain") == "?? notes.txt"  # restored; pre-existing file kept
    assert (git_repo / "notes.txt").read_text() == "operator's own untracked file\n"


def test_a_gate_that_repoints_a_link_is_caught_without_the_link_being_followed(git_repo: Path,
                                                                               tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("same\n")
    b.write_text("same\n")
    (git_repo / "shared.txt").symlink_to(a)  # dirty before the gate: the gate may not change it
    cmd = f"ln -sfn {b} shared.txt"
    res = run_gate(project(fast=cmd), "fast", git_repo)
    # the two targets read alike: only the link's own text tells that the gate changed it
    assert not res.passed and res.changed_files == ["shared.txt"], res


def test_missing_command(git_repo: Path) -> None:
    res = run_gate(project(fast="no-such-tool-xyz --check"), "fast", git_repo)
    assert not res.passed and res.exit_code is None
    assert "command not found: no-such-tool-xyz" in (res.reason or "") and res.not_installed
    res = run_gate(project(fast="cd . && no-such-tool-xyz"), "fast", git_repo)  # judged by the shell
    assert not res.passed and res.exit_code == 127 and "command not found" in (res.reason or "")
    res = run_gate(project(fast="./scripts/check.sh"), "fast", git_repo)  # the work's own script: its builder's
    assert not res.passed and not res.not_installed


def test_undefined_level(git_repo: Path) -> None:
    res = run_gate(project(), "slow", git_repo)
    assert not res.passed and "not defined" in (res.reason or "")


def test_timeout_kills_the_process_group(git_repo: Path) -> None:
    marker = git_repo / "child-survived"  # inside the checkout: the one place a confined gate may write
    # a grandchild that would write the marker later must die with the gate
    cmd = f"sh -c 'sleep 1; touch {marker}' & sleep 30"
    res = run_command(cmd, git_repo, level="fast", timeout=0.3)
    assert not res.passed and res.timed_out and "timed out" in (res.reason or "")
    import time
    time.sleep(1.5)
    assert not marker.exists()


def test_setup_commands(git_repo: Path) -> None:
    cfg = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"},
                                        "setup": ["touch made-by-setup", "false"]})
    res = run_setup(cfg, git_repo)
    assert res is not None and res.level == "setup[1]" and (git_repo / "made-by-setup").exists()


# --- confinement: a gate runs worker-written code -------------------------------------------------

@pytest.fixture
def two_worktrees(git_repo: Path) -> tuple[RepoLayout, Path, Path]:
    layout = RepoLayout(git_repo)
    a, _ = wt.create_worktree(layout, "j", "a", "HEAD")
    b, _ = wt.create_worktree(layout, "j", "b", "HEAD")
    return layout, a, b


def _writes(target: Path) -> str:
    return f"{PY} -c \"open({str(target)!r}, 'w').write('pwned')\""


def test_gate_cannot_write_home_main_checkout_or_other_worktrees(two_worktrees, isolated_home: Path) -> None:
    layout, a, b = two_worktrees
    targets = {"home": isolated_home / ".bashrc", "main checkout": layout.root / "src" / "pwned.py",
               "main checkout's project": layout.root / ".ai" / "project.yaml",
               "other worktree": b / "src" / "pwned.py", "pilothouse data": paths.data_dir() / "pwned"}
    for what, target in targets.items():
        res = run_gate(project(fast=_writes(target)), "fast", a)
        assert not res.passed and res.exit_code not in (0, None), (what, res)
        assert "Error" in res.output_tail, (what, res.output_tail)  # EROFS / ENOENT / EACCES
        assert not target.exists(), what
    assert git(layout.root, "status", "--porcelain") == "" and git(b, "status", "--porcelain") == ""


def test_worker_conftest_cannot_escape_and_real_tests_still_run(two_worktrees, isolated_home: Path) -> None:
    """The realistic attack: the worker plants a conftest.py; the gate (pytest) imports it."""
    layout, a, b = two_worktrees
    victims = [isolated_home / ".bashrc", layout.root / "src" / "calc.py", b / "src" / "calc.py"]
    (a / "tests" / "conftest.py").write_text(
        "import pathlib\n"
        f"for p in {[str(v) for v in victims]!r}:\n"
        "    try:\n"
        "        pathlib.Path(p).write_text('pwned')\n"
        "        print('ESCAPED', p)\n"
        "    except OSError as exc:\n"
        "        print('blocked', exc.errno)\n")
    assert co.commit_all(a, "worker's work")
    host_tmp = Path("/tmp") / f"ph-gate-{uuid.uuid4().hex}"
    (a / "tests" / "test_tmp.py").write_text(
        f"def test_private_tmp():\n    open({str(host_tmp)!r}, 'w').write('x')\n")
    co.commit_all(a, "uses /tmp")
    res = run_gate(project(full=f"{PY} -m pytest -q -s -p no:cacheprovider"), "full", a)
    assert res.passed, res
    assert "2 passed" in res.output_tail and "ESCAPED" not in res.output_tail
    assert res.output_tail.count("blocked") == 3
    assert not victims[0].exists() and not host_tmp.exists()  # /tmp is the gate's own
    assert "pwned" not in victims[1].read_text() and "pwned" not in victims[2].read_text()


def test_confinement_off_runs_on_the_host(git_repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "written-by-gate"
    res = run_gate(project("off", fast=_writes(outside)), "fast", git_repo)
    assert res.passed, res
    assert outside.read_text() == "pwned"


def test_confined_gate_gets_no_secrets(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-gates")
    check = (f"{PY} -c \"import os, sys; sys.exit(1 if 'OPENAI_API_KEY' in os.environ or "
             "os.environ.get('GATE_LEVEL') != 'x' else 0)\"")
    assert run_gate(project(fast=check), "fast", git_repo, env={"GATE_LEVEL": "x"}).passed


def test_shell_keywords_are_not_taken_for_missing_programs(git_repo) -> None:
    from pilothouse.core.git.gates import run_command

    for command in ('case "$HOME" in /*) true;; esac', "until true; do :; done", ": ok"):
        res = run_command(command, git_repo, level="fast", settings={"confinement": "off"})
        assert res.passed, (command, res.reason)


def test_a_gate_keeps_its_whole_output_where_gate_log_says(git_repo: Path, tmp_path: Path) -> None:
    """The event carries the tail; the operator's gate view reads the whole output from the file."""
    from pilothouse.core.git.gates import TAIL_BYTES, gate_log

    log = gate_log(tmp_path / "runtime", "job-1", "../../escape", "fast")
    assert log.parent == tmp_path / "runtime" / "gates" / "job-1"  # a task id never leads out of gates/
    cmd = "for i in $(seq 1 3000); do echo line-$i; done; exit 1"
    res = run_command(cmd, git_repo, level="fast", log_to=log)
    assert not res.passed and len(res.output_tail) <= TAIL_BYTES and "line-1\n" not in res.output_tail
    kept = log.read_text()
    assert kept.startswith("line-1\n") and kept.rstrip().endswith("line-3000")


def test_a_configured_key_the_gate_prints_is_in_neither_its_tail_nor_its_kept_log(git_repo: Path,
                                                                                tmp_path: Path) -> None:
    """A gate runs the worker's code, which can print the run's key: its tail goes into the problem
    and the resume's task, its log to the operator's gate view, so both are redacted at the source."""
    from pilothouse.core.git.gates import gate_log
    from pilothouse.providers import keys

    secret = "sk-sim-" + "9c2e5a" * 6
    keys.set_key("sim", secret, use_backend="file")
    log = gate_log(tmp_path / "runtime", "job-1", "one", "fast")
    res = run_command(f"echo before {secret} after; exit 1", git_repo, level="fast", log_to=log)
    assert not res.passed
    for text in (res.output_tail, log.read_text()):
        assert secret not in text and "before " in text and " after" in text, text
