"""`setup:` steps with a cache: the command runs once per content of its lockfiles, and the next
worktree with the same lockfiles gets what it made without running it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pilothouse.core.git.gates import run_setup
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers import paths

# a fresh random stamp each time the command really runs
MAKE = "mkdir -p deps && od -An -N8 -tx8 /dev/urandom > deps/stamp && ln -s stamp deps/link"


def _project(cache: bool) -> ProjectConfig:
    step: object = {"run": MAKE, "cache": {"key": ["package-lock.json"], "paths": ["deps"]}} if cache else MAKE
    return ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}, "setup": [step]})


def _worktree(repo: Path, name: str) -> Path:
    wt = paths.data_dir() / "worktrees" / name
    wt.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "worktree", "add", "-q", "-b", name, str(wt)], cwd=repo, check=True, capture_output=True)
    return wt


def _stamp(project: ProjectConfig, wt: Path) -> str:
    failed = run_setup(project, wt)
    assert failed is None, (failed.reason, failed.output_tail)
    assert (wt / "deps" / "link").is_symlink()  # kept as a link, not followed
    return (wt / "deps" / "stamp").read_text()


def test_a_cached_setup_step_runs_once_per_lockfile_content(git_repo: Path) -> None:
    (git_repo / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}\n')
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "lockfile"], cwd=git_repo, check=True)
    first = _stamp(_project(True), _worktree(git_repo, "a"))
    assert _stamp(_project(True), _worktree(git_repo, "b")) == first  # restored, not run again
    changed = _worktree(git_repo, "c")
    (changed / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {"x": {}}}\n')
    assert _stamp(_project(True), changed) != first  # another lockfile: run again
    assert _stamp(_project(False), _worktree(git_repo, "d")) != first  # without a cache: every worktree


def test_a_setup_cache_names_paths_inside_the_repository() -> None:
    for bad in ({"key": [], "paths": ["deps"]}, {"key": ["../lock"], "paths": ["deps"]},
                {"key": ["lock"], "paths": ["/opt/deps"]}):
        with pytest.raises(ValueError, match="setup"):
            ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"},
                                          "setup": [{"run": "true", "cache": bad}]})
