"""Every test runs with HOME, XDG_* and PILOTHOUSE_HOME pointing into its own tmp dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import ISOLATED, git, guard, isolated_env, no_bwrap_env, project_layout, run_cli  # noqa: F401

if TYPE_CHECKING:
    pass

REPO_ROOT = Path(__file__).resolve().parent.parent
# third-party projects' own sources and tests (tests/core/test_own_repo.py runs them as gates)
collect_ignore_glob = ["core/fixtures/thirdparty/*"]
# Variables a test may inherit from the runner's environment; everything else about the user is replaced.

@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path_factory.mktemp("home")
    for var in ISOLATED:
        monkeypatch.delenv(var, raising=False)
    for var, value in isolated_env(base).items():
        monkeypatch.setenv(var, value)
    home = base / "home"
    # npm's own settings (cache, userconfig, prefix) could point a test's npm at the real home
    for var in [v for v in os.environ if v.lower().startswith("npm_config_")]:
        monkeypatch.delenv(var)
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A small Python project with one commit and a passing test suite."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "README.md").write_text("# demo project\n")
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent.parent / 'src'))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


@pytest.fixture
def cli():
    return run_cli


