"""Attack 7: the cockpit's `!` opens the operator's unconfined shell in a worker's worktree, where
the worker nested a repository whose config names a command for git's fsmonitor, its hooks and
its external diff. A plain `git status` there (or a git-aware prompt) would run them as the
operator; in the shell the cockpit opens, git runs none of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import git, guard

pytestmark = pytest.mark.anyio

# the operator at work in the lent shell: what a prompt and a careful look would run
OPERATOR = """#!/bin/sh
git status --short
git diff
cd vendor/evil || exit 1
git status --short
git diff
git -p log -1 --stat
git add -A
echo "$GIT_CONFIG_COUNT" > "{done}"
"""


def nest_hostile_repo(wt: Path, marker: Path) -> None:
    """A repository inside the worktree whose own config runs `marker` whichever way git turns."""
    nested = wt / "vendor" / "evil"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "f.txt").write_text("one\n")
    git(nested, "add", "f.txt")
    git(nested, "-c", "user.email=w@x", "-c", "user.name=w", "commit", "-qm", "one")
    (nested / "f.txt").write_text("two\n")
    run = nested / ".git" / "run.sh"
    run.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    run.chmod(0o755)
    hooks = nested / ".git" / "hooks"
    for hook in ("post-index-change", "pre-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\necho hook {hook} >> {marker}\n")
        (hooks / hook).chmod(0o755)
    for key in ("core.fsmonitor", "diff.external", "core.pager"):
        git(nested, "config", key, str(run))


def operator_shell(tmp_path: Path) -> tuple[Path, Path]:
    done = tmp_path / "shell-done"
    shell = tmp_path / "operator-shell.sh"
    shell.write_text(OPERATOR.format(done=done))
    shell.chmod(0o755)
    return shell, done


def test_without_the_shells_settings_the_nested_repository_runs_its_commands(ui_worktree, tmp_path) -> None:
    # what the attack relied on: the same shell with a plain environment
    marker = tmp_path / "marker"
    nest_hostile_repo(ui_worktree, marker)
    shell, done = operator_shell(tmp_path)
    subprocess.run([str(shell)], cwd=ui_worktree, capture_output=True, timeout=guard(120), stdin=subprocess.DEVNULL,
                   env={**os.environ, "GIT_PAGER": "cat"})
    assert done.exists() and marker.exists()
    assert "run.sh" in marker.read_text()


async def test_the_cockpits_shell_runs_nothing_a_nested_repository_names(
        cockpit_repo, ui_worktree, make_app, wait_for, monkeypatch, tmp_path) -> None:
    marker = tmp_path / "marker"
    nest_hostile_repo(ui_worktree, marker)
    shell, done = operator_shell(tmp_path)
    monkeypatch.setenv("SHELL", str(shell))
    monkeypatch.delenv("GIT_PAGER", raising=False)
    app = make_app(cockpit_repo)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3", "j", "j")  # calendar-ui, its worktree holds the nested repository
        await pilot.pause()
        await pilot.press("exclamation_mark")
        await wait_for(pilot, done.exists)
    assert not marker.exists(), marker.read_text()
    assert int(done.read_text()) >= 6  # the shell got the settings (and git ran under them)


def test_the_shell_settings_keep_the_operators_own_and_git_diff_working(tmp_path) -> None:
    from pilothouse.core.git.shell_env import SHELL_GIT_CONFIG, shell_env

    env = shell_env({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "me",
                     "PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert env["GIT_CONFIG_KEY_0"] == "user.name" and env["GIT_CONFIG_COUNT"] == str(1 + len(SHELL_GIT_CONFIG))
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.email=a@b", "commit", "-qm", "a")
    (repo / "a.txt").write_text("two\n")
    shown = subprocess.run(["git", "diff"], cwd=repo, env=env, capture_output=True, text=True, timeout=guard(60))
    assert shown.returncode == 0 and "-one" in shown.stdout and "+two" in shown.stdout, shown.stderr
    said = subprocess.run(["git", "config", "user.name"], cwd=repo, env=env, capture_output=True, text=True)
    assert said.stdout.strip() == "me"


def test_the_shell_banner_says_it_is_unconfined() -> None:
    from pilothouse.tui.fix import SHELL_BANNER

    said = SHELL_BANNER.format(where="j/t", cwd="/w")
    assert said.startswith("an UNCONFINED shell in the worktree of j/t") and "outside the sandbox" in said
