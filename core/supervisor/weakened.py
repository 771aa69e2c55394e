"""A task's gate passed: did the work get it there by weakening the tests? (core/git/weakening.py)

Runs in the gate's worker thread, after the gate: the commit's test changes against the task's
base, and the same gate's counts on that base (measured once per base commit and level, in a
throwaway detached worktree, confined like any gate) against the task's.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from pilothouse.core.git.gates import GateResult, run_gate
from pilothouse.core.git.weakening import Weakening, find
from pilothouse.core.git.worktrees import git
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers import paths

_base_counts: dict[tuple[str, str, str], dict[str, Any] | None] = {}
_lock = threading.Lock()


def base_counts(project: ProjectConfig, level: str, cwd: str, since: str) -> dict[str, Any] | None:
    """The gate's counts on commit `since` (None when it reports none)."""
    common = git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")
    key = (common, since, level)
    with _lock:
        if key in _base_counts:
            return _base_counts[key]
    root = paths.cache_dir() / "gates"
    root.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="base-", dir=root))
    try:
        git(cwd, "worktree", "add", "--detach", "-q", str(tree), since)
        res = run_gate(project, level, tree)
        counts = res.counts
    finally:
        git(cwd, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tree, ignore_errors=True)
    with _lock:
        _base_counts[key] = counts
    return counts


def check(project: ProjectConfig, level: str, cwd: str, base: str | None, tdef: Any,
          res: GateResult) -> tuple[list[Weakening], dict[str, Any] | None]:
    """(what was weakened, the base's counts) for a gate that passed; nothing when there is no base."""
    if not base or not res.passed:
        return [], None
    since = git(cwd, "merge-base", base, "HEAD")
    before = base_counts(project, level, cwd, since) if res.counts else None
    reason = str(getattr(tdef, "test_change_reason", "") or "")
    found = find(cwd, since, declared=list(tdef.expected_paths.write), reason=reason,
                 counts=res.counts, base_counts=before)
    return found, before
