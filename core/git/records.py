"""A worktree's .ai/ is the host's: what a builder did there is never its work.

The task graph (.ai/tasks.yaml), the job records (.ai/jobs/*.json), the skills (.ai/skills/) and
the project's settings (.ai/project.yaml, bound read-only into the sandbox) are pilothouse's own
records. Before a builder's work is committed, every .ai path is put back as the host's copy has
it (the commit the worktree started from): what the builder changed there is undone, what it
added is removed (through providers/workerfs.py: nothing it planted is followed), and .ai never
reaches `git add`. A builder that moved .ai away (`mv .ai elsewhere` inside the sandbox takes the
read-only bind of project.yaml with it and lets a fresh .ai/project.yaml be written) is refused
as a scope violation: its tree no longer says which settings are the operator's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pilothouse.core.git.worktrees import git, git_run

AI = ".ai"
KEPT = (".ai/runtime",)  # the runtime store is no record and is bound read-only anyway


class ScopeViolation(Exception):
    """The builder changed what is the host's in a way that cannot be undone by restoring it."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


def _tracked(worktree: Path, base: str) -> list[str]:
    out = git(worktree, "ls-tree", "-r", "-z", "--name-only", base, "--", AI, strip=False)
    return [p for p in out.split("\0") if p]


def _blob(worktree: Path, base: str, rel: str) -> str | None:
    proc = git_run(worktree, "rev-parse", "--verify", "-q", f"{base}:{rel}")
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _moved_copy(worktree: Path, base: str, tracked: list[str], changed: list[str]) -> list[str]:
    """New paths outside .ai holding the host's .ai/project.yaml byte for byte: a renamed .ai.
    `changed`: every path the worktree changed against `base`."""
    want = _blob(worktree, base, f"{AI}/project.yaml") if f"{AI}/project.yaml" in tracked else None
    if want is None:
        return []
    untracked = git(worktree, "ls-files", "-z", "--others", "--exclude-standard", strip=False).split("\0")
    cands = [p for p in {*untracked, *changed} if p and p.endswith("/project.yaml") and not p.startswith(f"{AI}/")]
    found = []
    for rel in sorted(cands):
        p = worktree / rel
        try:
            if not stat.S_ISREG(os.lstat(p).st_mode):
                continue
        except OSError:
            continue
        if git(worktree, "hash-object", "--no-filters", "--", rel) == want:
            found.append(rel)
    return found


def restore_records(worktree: Path | str, base: str | None) -> list[str]:
    """Put the worktree's .ai back as commit `base` (default HEAD) has it; returns the paths that
    were undone. Raises ScopeViolation when .ai was moved away or replaced."""
    from pilothouse.providers import workerfs

    wt = Path(worktree)
    base = base or "HEAD"
    tracked = _tracked(wt, base)
    # one diff of the whole tree serves both: the renamed-.ai check and what changed under .ai
    every = git(wt, "diff", "-z", "--name-only", "--no-renames", base, strip=False).split("\0")
    moved = _moved_copy(wt, base, tracked, every)
    try:
        ai_mode = os.lstat(wt / AI).st_mode
    except FileNotFoundError:
        ai_mode = None
    if moved or (tracked and (ai_mode is None or not stat.S_ISDIR(ai_mode))):
        where = f" (its project.yaml is now at {', '.join(moved[:3])})" if moved else ""
        raise ScopeViolation(f"the builder moved or replaced .ai{where}: .ai is pilothouse's, the builder's "
                             "work may not change it; restore .ai in the worktree, then retry", moved or [AI])
    undone: list[str] = []
    # what the worker changed or added under .ai, as git sees it against the host's copy
    changed = [p for p in every if p == AI or p.startswith(AI + "/")]
    # --directory: a folder the worker added goes as one entry, and with it everything in it; no
    # exclude rules are given, so what a .gitignore (the worker's too) ignores is listed as well
    added = git(wt, "ls-files", "-z", "--others", "--directory", "--", AI, strip=False).split("\0")
    for rel in sorted({p.rstrip("/") for p in (*changed, *added) if p}):
        if any(rel == k or rel.startswith(k + "/") for k in KEPT):
            continue
        try:
            workerfs.remove(wt, rel)
        except (OSError, ValueError):
            continue
        undone.append(rel)
    back = [p for p in undone if p in tracked]
    if back:
        git(wt, "checkout", "-q", base, "--", *back)
        # the worker's own commits may have changed them: the host's copy is what the commit holds
        git(wt, "add", "-f", "--", *back)
    return undone
