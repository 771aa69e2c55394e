"""Which repository a command works on when it is run from inside a worktree."""

from __future__ import annotations

from pathlib import Path

from pilothouse.core.git.worktrees import create_worktree
from pilothouse.core.records.layout import find_repo
from support import git


def test_inside_a_task_worktree_the_repository_is_the_main_checkout(git_repo: Path) -> None:
    main = find_repo(git_repo)
    path, _branch = create_worktree(main, "j1", "t1", "HEAD")
    (path / "src" / "deep").mkdir()
    for where in (path, path / "src" / "deep"):
        layout = find_repo(where)
        assert layout.root == git_repo.resolve()
        assert layout.events == git_repo.resolve() / ".ai" / "runtime" / "events.jsonl"


def test_the_operators_own_linked_worktree_is_a_repository_of_its_own(git_repo: Path, tmp_path: Path) -> None:
    mine = tmp_path / "my-worktree"
    git(git_repo, "worktree", "add", "-q", "-b", "experiment", str(mine))
    assert find_repo(mine).root == mine.resolve()
