"""Every test runs with HOME, XDG_* and PILOTHOUSE_HOME pointing into its own tmp dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import git, guard, no_bwrap_env, project_layout  # noqa: F401  (helpers the fixtures use)

if TYPE_CHECKING:
    pass

REPO_ROOT = Path(__file__).resolve().parent.parent
# third-party projects' own sources and tests (tests/core/test_own_repo.py runs them as gates)
collect_ignore_glob = ["core/fixtures/thirdparty/*"]
# Variables a test may inherit from the runner's environment; everything else about the user is replaced.
_ISOLATED = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
             "XDG_RUNTIME_DIR", "PILOTHOUSE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path_factory.mktemp("home")
    home = base / "home"
    home.mkdir()
    for var in _ISOLATED:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("PILOTHOUSE_HOME", str(base / "pilothouse"))
    # real git in tests needs an identity and a predictable default branch
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
    )
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


def run_cli(*args: str, cwd: Path | None = None, input: str | None = None, timeout: float | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess with the test's (isolated) environment; `timeout` only
    guards against a hang, so it is at least support.GUARD_S, however busy the machine."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=guard(timeout), env=full_env)


@pytest.fixture
def cli():
    return run_cli


