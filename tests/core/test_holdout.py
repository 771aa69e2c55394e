"""Holdout tests: the operator's folder in the main checkout, added to a worktree only while its gate runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pilothouse.core.git.gates import run_gate
from pilothouse.core.records.project import ProjectConfig
from support import git

HIDDEN = ("import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent.parent / 'src'))\n"
          "from calc import add\n\n\ndef test_negative_numbers_kept_secret():\n    assert add(-2, -3) == -5\n")


@pytest.fixture
def worktree(git_repo: Path, tmp_path: Path) -> Path:
    (git_repo / "holdout").mkdir()
    (git_repo / "holdout" / "test_hidden.py").write_text(HIDDEN)
    (git_repo / ".git" / "info" / "exclude").write_text("holdout/\n")  # untracked: in no worktree
    wt = tmp_path / "wt"
    git(git_repo, "worktree", "add", "-q", "-b", "task", str(wt))
    assert not (wt / "holdout").exists()
    return wt


def gate(confinement: str = "on") -> ProjectConfig:
    return ProjectConfig.model_validate({"gates": {"fast": "true", "full": f"{sys.executable} -m pytest -q -p no:cacheprovider",
                                                   "holdout": "holdout"}, "confinement": confinement})


def test_work_that_fails_the_holdout_fails_the_gate_with_counts_only(worktree: Path) -> None:
    (worktree / "src" / "calc.py").write_text("def add(a, b):\n    return abs(a) + abs(b)\n")  # games the visible test
    res = run_gate(gate(), "full", worktree)
    assert not res.passed
    assert res.reason == ("gate 'full': the holdout tests failed (1 failed, 0 errors, 1 passed, 0 skipped of 2); "
                          "their output is kept from workers")
    assert "negative_numbers" not in res.output_tail and "holdout" not in res.output_tail
    assert res.holdout is not None and res.holdout["counts"]["failed"] == 1
    assert not (worktree / "holdout").exists()  # the copy is gone with the gate


def test_honest_work_passes_the_holdout_and_the_tree_is_as_it_was(worktree: Path) -> None:
    res = run_gate(gate(), "full", worktree)
    assert res.passed, res.reason
    assert res.holdout == {"passed": True, "counts": {**res.holdout["counts"], "collected": 2, "passed": 2}}
    assert git(worktree, "status", "--porcelain") == ""


def test_a_holdout_folder_planted_by_the_work_is_refused_not_merged_with(worktree: Path) -> None:
    (worktree / "holdout").mkdir()
    (worktree / "holdout" / "test_fake.py").write_text("def test_ok():\n    pass\n")
    res = run_gate(gate(), "full", worktree)
    assert not res.passed
    assert res.reason == "the work has its own holdout: the holdout tests cannot be added (remove it from the task's branch)"
    assert (worktree / "holdout" / "test_fake.py").exists()  # the work's own files are not ours to remove


def test_a_tracked_holdout_folder_is_refused_it_is_in_every_worktree(worktree: Path, git_repo: Path) -> None:
    (git_repo / ".git" / "info" / "exclude").write_text("")
    git(git_repo, "add", "holdout")  # the operator's checkout tracks it
    res = run_gate(gate(), "full", worktree)
    assert not res.passed and res.reason == ("gates.holdout in .ai/project.yaml: holdout is tracked by git, so every "
                                             "worker can read it: untrack it (git rm -r --cached)")


def test_a_link_the_work_committed_at_the_holdout_path_is_the_works_own_and_refused(worktree: Path,
                                                                                     git_repo: Path) -> None:
    (worktree / "holdout").symlink_to(git_repo / "holdout")  # what a builder can plant and commit
    git(worktree, "add", "-A")
    git(worktree, "commit", "-qm", "peek")
    res = run_gate(gate(), "full", worktree)
    assert not res.passed
    assert res.reason == "the work has its own holdout: the holdout tests cannot be added (remove it from the task's branch)"
    assert (git_repo / "holdout" / "test_hidden.py").read_text() == HIDDEN  # the copy never went through it


def test_a_link_on_the_way_to_the_holdout_folder_is_refused_nothing_is_written_outside(git_repo: Path,
                                                                                       tmp_path: Path) -> None:
    (git_repo / "qa" / "holdout").mkdir(parents=True)
    (git_repo / "qa" / "holdout" / "test_hidden.py").write_text(HIDDEN)
    (git_repo / ".git" / "info" / "exclude").write_text("qa/\n")
    wt = tmp_path / "wt"
    git(git_repo, "worktree", "add", "-q", "-b", "task", str(wt))
    outside = tmp_path / "outside"
    outside.mkdir()
    (wt / "qa").symlink_to(outside)  # what a builder can commit
    project = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true", "holdout": "qa/holdout"}})
    res = run_gate(project, "full", wt)
    assert not res.passed
    assert res.reason == ("the work made a folder on the way to qa/holdout a link: the holdout tests cannot be "
                          "added (remove the link from the task's branch)")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError("the record of the gate's pid could not be written"),
                                   KeyboardInterrupt()])
def test_a_rerun_that_raises_leaves_no_holdout_test_in_the_worktree(worktree: Path, error: BaseException) -> None:
    """The rerun with the holdout tests ends in an exception (its caller's on_start fails, the operator
    presses Ctrl-C): the copy goes all the same, or the builder's next run reads the held-out tests."""
    started: list[int] = []

    def on_start(pgid: int) -> None:
        started.append(pgid)
        if len(started) == 2:  # the rerun, with the holdout tests in the tree
            assert (worktree / "holdout" / "test_hidden.py").read_text() == HIDDEN
            raise error

    with pytest.raises(type(error)):
        run_gate(gate(), "full", worktree, on_start=on_start)
    assert len(started) == 2
    assert not (worktree / "holdout").exists()
    assert git(worktree, "status", "--porcelain", "--ignored") == ""
