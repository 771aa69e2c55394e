"""Gates: real commands in a real worktree."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import git
from pilothouse.core.gates import run_command, run_gate, run_setup
from pilothouse.core.project import ProjectConfig

PY = sys.executable


def project(**gates: str) -> ProjectConfig:
    return ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true", **gates}})


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


def test_missing_command(git_repo: Path) -> None:
    res = run_gate(project(fast="no-such-tool-xyz --check"), "fast", git_repo)
    assert not res.passed and res.exit_code is None
    assert "command not found: no-such-tool-xyz" in (res.reason or "")
    res = run_gate(project(fast="cd . && no-such-tool-xyz"), "fast", git_repo)  # judged by the shell
    assert not res.passed and res.exit_code == 127 and "command not found" in (res.reason or "")


def test_undefined_level(git_repo: Path) -> None:
    res = run_gate(project(), "slow", git_repo)
    assert not res.passed and "not defined" in (res.reason or "")


def test_timeout_kills_the_process_group(git_repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "child-survived"
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
