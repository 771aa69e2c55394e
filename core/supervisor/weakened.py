"""A task's gate passed: did the work get it there by weakening the tests? (core/git/weakening.py)

Runs in the gate's worker thread, after the gate: the commit's test changes against the task's
base, and the same gate's counts on that base (measured once per base commit and level, in a
throwaway detached worktree, confined like any gate) against the task's.
"""

from __future__ import annotations

import re
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

_base_results: dict[tuple[str, str, str], GateResult] = {}
_lock = threading.Lock()


def base_result(project: ProjectConfig, level: str, cwd: str, since: str) -> GateResult:
    """The gate run on commit `since` (once per repository, commit and level)."""
    common = git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")
    key = (common, since, level)
    with _lock:
        if key in _base_results:
            return _base_results[key]
    root = paths.cache_dir() / "gates"
    root.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="base-", dir=root))
    try:
        git(cwd, "worktree", "add", "--detach", "-q", str(tree), since)
        res = run_gate(project, level, tree)
    finally:
        git(cwd, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tree, ignore_errors=True)
    with _lock:
        _base_results[key] = res
    return res


def base_counts(project: ProjectConfig, level: str, cwd: str, since: str) -> dict[str, Any] | None:
    """The gate's counts on commit `since` (None when it reports none)."""
    return base_result(project, level, cwd, since).counts


_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def _last_words(output: str) -> str:
    """The output's last line with its numbers taken out (a time, a pid), to compare two runs."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return _NUMBERS.sub("#", lines[-1]) if lines else ""


def fails_on_base(project: ProjectConfig, level: str, cwd: str, base: str | None,
                  res: GateResult) -> str | None:
    """The base commit (short) when a failed gate fails the same way there: the repository's own
    tests fail before the task, which no builder round can fix. None otherwise."""
    if res.passed or not base or res.not_installed or res.timed_out or not res.exit_code:
        # exit 0: the command passed and a check after it failed (the holdout tests, or the work's
        # own holdout folder): the base failing the holdout tests is what the task is for
        return None
    since = git(cwd, "merge-base", base, "HEAD")
    before = base_result(project, level, cwd, since)
    if before.passed or before.exit_code != res.exit_code:
        return None
    if before.counts is not None or res.counts is not None:
        # the task may have added passing tests: the same failures are what make it the base's
        def failing(counts: dict[str, Any] | None) -> tuple[Any, Any] | None:
            return (counts.get("failed"), counts.get("errors")) if counts else None

        alike = failing(before.counts) == failing(res.counts)
    else:
        alike = _last_words(before.output_tail) == _last_words(res.output_tail)
    return since[:10] if alike else None


def check(project: ProjectConfig, level: str, cwd: str, base: str | None, tdef: Any,
          res: GateResult) -> tuple[list[Weakening], dict[str, Any] | None]:
    """(what was weakened, the base's counts) for a gate that passed; nothing when there is no base."""
    if not base or not res.passed:
        return [], None
    since = git(cwd, "merge-base", base, "HEAD")
    before = base_counts(project, level, cwd, since) if res.counts else None
    reason = str(getattr(tdef, "test_change_reason", "") or "")
    found = find(cwd, base, declared=list(tdef.expected_paths.write), reason=reason,
                 counts=res.counts, base_counts=before, merge_base=since)
    return found, before
