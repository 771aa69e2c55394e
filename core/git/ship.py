"""`pilothouse ship`: an accepted job's work onto the base branch, or onto a branch of its own.

The commits are made away from the operator's checkout, in a scratch worktree next to the task
worktrees (a merge commit, or one commit per task with `squash`); the base branch then only
fast-forwards to them. Where the base branch is checked out, that checkout is fast-forwarded by
git itself, and only when none of its uncommitted changes is in a file the work touches: their
edits are never overwritten, and nothing else of their checkout changes. Hooks are off for every
git call here: a hooks path inside the repository would run worker-written files unconfined.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pilothouse.core.git.integration import base_branch
from pilothouse.core.git.worktrees import (
    GitError,
    branch_exists,
    checkout_of,
    dirty_paths,
    git,
    git_ok,
    git_run,
    some_paths,
    worktree_root,
)
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers.errors import UserError

NO_HOOKS = ("-c", "core.hooksPath=/dev/null")


@contextmanager
def _scratch(layout: RepoLayout, start: str) -> Iterator[Path]:
    """A detached worktree at `start`, removed afterwards whatever happened."""
    root = worktree_root(layout)
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="_ship-", dir=root))
    git(layout.root, "worktree", "add", "-q", "--detach", str(path), start)
    try:
        yield path
    finally:
        git(layout.root, "worktree", "remove", "--force", "--force", str(path), check=False)
        git(layout.root, "worktree", "prune", check=False)


def _merge_commit(layout: RepoLayout, start: str, head: str, message: str) -> str:
    with _scratch(layout, start) as wt:
        proc = git_run(wt, *NO_HOOKS, "merge", "--no-ff", "--no-edit", "-m", message, head)
        if proc.returncode != 0:
            conflicts = [p for p in git(wt, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
            git(wt, "merge", "--abort", check=False)
            what = f"conflicts in {some_paths(conflicts)}" if conflicts else (proc.stderr or proc.stdout).strip()
            raise UserError(f"the job's work does not merge onto {start[:10]}: {what}: merge the integration "
                            "branch into your branch by hand, or ship --branch NAME and resolve it there")
        return git(wt, "rev-parse", "HEAD")


def _task_commits(layout: RepoLayout, start: str, merges: list[tuple[str, str]], job: str) -> str:
    """One commit per task on top of `start`: each task's merge, as the change it made to the
    integration branch (its diff against the merge's first parent)."""
    with _scratch(layout, start) as wt:
        for sha, task in merges:
            proc = git_run(wt, *NO_HOOKS, "cherry-pick", "--no-commit", "-m", "1", sha)
            if proc.returncode != 0:
                conflicts = [p for p in git(wt, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
                git(wt, "cherry-pick", "--abort", check=False)
                raise UserError(f"task {task} of job {job} does not apply onto {start[:10]}"
                                f"{': conflicts in ' + some_paths(conflicts) if conflicts else ''}: ship without "
                                "--squash (one merge commit), or ship --branch NAME and resolve it there")
            if git_ok(wt, "diff", "--cached", "--quiet"):
                continue  # already in the base branch
            subject = git(wt, "log", "-1", "--format=%s", sha).removeprefix("Merge ")
            git(wt, *NO_HOOKS, "commit", "-q", "--no-verify", "-m", f"{subject}\n\njob: {job}\ntask: {task}")
        return git(wt, "rev-parse", "HEAD")


def ship(layout: RepoLayout, project: ProjectConfig, job: str, head: str, merges: list[tuple[str, str]], *,
         branch: str | None = None, squash: bool = False) -> dict[str, Any]:
    """Put `head` (the integration head the job was accepted at) onto the base branch, or onto a new
    branch `branch`. `merges`: (merge commit, task) of the job's tasks, oldest first, for `squash`.
    Returns {mode, base, target, previous, new}."""
    base = base_branch(layout, project)
    start = git(layout.root, "rev-parse", "--verify", f"refs/heads/{base}^{{commit}}")
    if branch is not None:
        if not git_ok(layout.root, "check-ref-format", "--branch", branch) or branch.startswith("-"):
            raise UserError(f"--branch {branch!r} is not a valid branch name")
        if branch_exists(layout.root, branch):
            raise UserError(f"--branch {branch}: that branch exists already: pick a new name")
    if not squash and git_ok(layout.root, "merge-base", "--is-ancestor", head, start):
        return {"mode": "already", "base": base, "target": base, "previous": start, "new": start}
    if squash:
        new, mode = _task_commits(layout, start, merges, job), "squash"
    elif git_ok(layout.root, "merge-base", "--is-ancestor", start, head):
        new, mode = head, "fast-forward"
    else:
        new, mode = _merge_commit(layout, start, head, f"Ship job {job} onto {base}"), "merge"
    if new == start:
        return {"mode": "already", "base": base, "target": base, "previous": start, "new": start}
    if branch is not None:
        git(layout.root, "branch", branch, new)
        return {"mode": mode, "base": base, "target": branch, "previous": None, "new": new}
    _land(layout, base, start, new, job)
    return {"mode": mode, "base": base, "target": base, "previous": start, "new": new}


def _land(layout: RepoLayout, base: str, start: str, new: str, job: str) -> None:
    """Move the base branch from `start` to `new` (a descendant)."""
    checkout = checkout_of(layout, base)
    if checkout is None:
        try:
            git(layout.root, "update-ref", "-m", f"pilothouse ship {job}", f"refs/heads/{base}", new, start)
        except GitError as exc:
            raise UserError(f"{base} moved while shipping ({exc.stderr.strip()}): ship again") from None
        return
    touched = set(git(layout.root, "diff", "--name-only", "-z", start, new, strip=False).split("\0")) - {""}
    overlap = sorted(p for p in dirty_paths(checkout) if p in touched)
    if overlap:
        raise UserError(f"your checkout {checkout} has uncommitted changes in {some_paths(overlap)}, which "
                        f"shipping job {job} would change: commit or stash them, then ship again "
                        f"(or ship --branch NAME)")
    proc = git_run(checkout, *NO_HOOKS, "merge", "-q", "--ff-only", new)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise UserError(f"could not fast-forward {base} in {checkout}: {detail[-1] if detail else 'git merge failed'}")
