"""Holdout tests (`gates.holdout`): a folder of tests the operator keeps out of every worker's sandbox.

It lives in the main checkout, untracked (a tracked folder would be in every worktree a worker
reads), and is hidden from sandboxes run there (providers/confine/repoview.holdout_path). When a
task's gate has passed, the folder is copied into the worktree at the same place, the gate runs
again with it, and the copy is removed: the builder can pass those tests only by doing the task.
What any model sees of that run is its counts, never its output (which names the tests).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.core.git.worktrees import git
from pilothouse.core.records.project import ProjectConfig


def _main_checkout(cwd: Path) -> Path:
    return Path(git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")).parent


def holdout_source(project: ProjectConfig, cwd: Path) -> Path | None:
    """The holdout folder in the main checkout of `cwd`'s repository (None: not configured)."""
    if not project.holdout:
        return None
    return _main_checkout(cwd) / project.holdout


def _counts_line(counts: dict | None) -> str:
    if not counts:
        return "no counts could be read"
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in ("failed", "errors", "passed", "skipped")) + \
        f" of {counts.get('collected', 0)}"


def run_holdout(project: ProjectConfig, level: str, cwd: Path, res: Any, rerun: Callable[[], Any]) -> Any:
    """`res` (gates.GateResult of a gate that passed) judged again with the holdout tests in the
    tree; `rerun` runs the gate once more (gates.py calls this: a callable, not an import back)."""
    source = holdout_source(project, cwd)
    if source is None:
        return res
    field = "gates.holdout in .ai/project.yaml"
    rel = project.holdout or ""
    fail = None
    if not source.is_dir() or source.is_symlink():
        fail = f"{field}: {source} is not a folder: create it in the main checkout or remove the setting"
    elif git(_main_checkout(cwd), "ls-files", "--", rel):
        # the operator's checkout tracks it (a path the work's branch tracks is the work's own, below)
        fail = f"{field}: {rel} is tracked by git, so every worker can read it: untrack it (git rm -r --cached)"
    elif (cwd / rel).exists() or (cwd / rel).is_symlink():
        fail = f"the work has its own {rel}: the holdout tests cannot be added (remove it from the task's branch)"
    elif any((cwd / part).is_symlink() for part in Path(rel).parents if str(part) != "."):
        # a folder on the way that the work made a link would send the copy (and the removal after
        # the gate) outside the worktree, as the operator's user
        fail = (f"the work made a folder on the way to {rel} a link: the holdout tests cannot be added "
                "(remove the link from the task's branch)")
    if fail is not None:
        res.passed, res.reason = False, fail
        return res
    target = cwd / rel
    try:
        shutil.copytree(source, target, symlinks=True)
        held = rerun()
    finally:
        shutil.rmtree(target, ignore_errors=True)
    res.holdout = {"passed": held.passed, "counts": held.counts}
    if not held.passed:
        # only counts: the reason and the output go to models (builder feedback, review brief)
        res.passed = False
        res.reason = f"gate '{level}': the holdout tests failed ({_counts_line(held.counts)}); their output is kept from workers"
    return res
