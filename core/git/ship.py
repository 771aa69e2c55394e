"""`pilothouse ship`: an accepted job's reviewed change onto the base branch, or onto a branch of its own.

What lands is the change the job's line holds at its accepted head, not the history of attempts:
by default one commit for the whole job (`job`), or one per task (`per-task`); `history` keeps
every commit (a merge commit, or a fast-forward). When the base branch has not moved since the
job's line left it, the job's commit carries exactly the tree its full gate passed. When it has
(another job shipped, the operator committed), the change is merged onto the new base in a
scratch worktree and the full gate runs again there: a conflict or a failing gate is refused in
one line and the base branch does not move, so a commit that failed a gate never reaches it.

The commits are made away from the operator's checkout, in a scratch worktree next to the task
worktrees; the base branch then only fast-forwards to them. Where the base branch is checked out,
that checkout is fast-forwarded by git itself, and only when none of its uncommitted changes is
in a file the work touches: their edits are never overwritten. Hooks are off for every git call
here: a hooks path inside the repository would run worker-written files unconfined.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
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
HOWS = ("job", "per-task", "history")


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


def _conflicts(wt: Path) -> list[str]:
    return [p for p in git(wt, "diff", "--name-only", "--diff-filter=U").splitlines() if p]


def _refuse_conflict(job: str, base: str, start: str, conflicts: list[str], detail: str) -> UserError:
    what = f"conflicts in {some_paths(conflicts)}" if conflicts else detail
    return UserError(f"job {job} does not merge onto {base} ({start[:10]}), which moved since the job started: "
                     f"{what}; nothing was shipped: ship --branch NAME and resolve it there, or correct the job "
                     f"(pilothouse job update {job}) so it is built again on the new {base}")


def _commit(wt: Path, message: str) -> str:
    git(wt, *NO_HOOKS, "commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    return git(wt, "rev-parse", "HEAD")


def _one_commit(layout: RepoLayout, start: str, head: str, message: str, job: str, base: str,
                extra: Callable[[Path], None] | None) -> str | None:
    """One commit on `start` with the job's change; None when `start` holds it already."""
    with _scratch(layout, start) as wt:
        proc = git_run(wt, *NO_HOOKS, "merge", "--squash", "--no-commit", head)
        if proc.returncode != 0:
            conflicts = _conflicts(wt)
            git(wt, "reset", "-q", "--hard", start, check=False)
            raise _refuse_conflict(job, base, start, conflicts, (proc.stderr or proc.stdout).strip()[-300:])
        if git_ok(wt, "diff", "--cached", "--quiet"):
            return None
        if extra is not None:
            extra(wt)
        return _commit(wt, message)


def _task_commits(layout: RepoLayout, start: str, merges: list[tuple[str, str, str]], job: str, base: str,
                  extra: Callable[[Path], None] | None) -> str | None:
    """One commit per task on top of `start`: each task's merge, as the change it made to the job's
    line (its diff against the merge's first parent). `merges`: (merge commit, task, message)."""
    with _scratch(layout, start) as wt:
        made = False
        for sha, task, message in merges:
            proc = git_run(wt, *NO_HOOKS, "cherry-pick", "--no-commit", "-m", "1", sha)
            if proc.returncode != 0:
                conflicts = _conflicts(wt)
                git(wt, "cherry-pick", "--abort", check=False)
                git(wt, "reset", "-q", "--hard", check=False)
                raise UserError(f"task {task} of job {job} does not apply onto {base} ({start[:10]})"
                                f"{': conflicts in ' + some_paths(conflicts) if conflicts else ''}; nothing was "
                                "shipped: ship it as one commit (without --per-task), or ship --branch NAME and "
                                "resolve it there")
            if git_ok(wt, "diff", "--cached", "--quiet"):
                continue  # already in the base branch
            _commit(wt, message)
            made = True
        if not made:
            return None
        if extra is not None:
            extra(wt)
            if not git_ok(wt, "diff", "--cached", "--quiet"):
                git(wt, *NO_HOOKS, "commit", "-q", "--no-verify", "--amend", "--no-edit")
        return git(wt, "rev-parse", "HEAD")


def _merge_commit(layout: RepoLayout, start: str, head: str, message: str, job: str, base: str,
                  extra: Callable[[Path], None] | None) -> str:
    with _scratch(layout, start) as wt:
        proc = git_run(wt, *NO_HOOKS, "merge", "--no-ff", "--no-commit", head)
        if proc.returncode != 0:
            conflicts = _conflicts(wt)
            git(wt, "merge", "--abort", check=False)
            raise _refuse_conflict(job, base, start, conflicts, (proc.stderr or proc.stdout).strip()[-300:])
        if extra is not None:
            extra(wt)
        return _commit(wt, message)


def _gate_again(layout: RepoLayout, project: ProjectConfig, job: str, base: str, new: str,
                env: dict[str, str] | None) -> dict[str, Any]:
    """The full gate on `new` (never gated as a whole): UserError when it fails."""
    from pilothouse.core.git.gates import run_gate

    with _scratch(layout, new) as wt:
        res = run_gate(project, "full", wt, env=env)
    if not res.passed:
        tail = " ".join(res.output_tail.strip().splitlines()[-2:])[-300:]
        raise UserError(f"the full gate failed on job {job} merged onto the new {base}: {res.reason}"
                        f"{' (' + tail + ')' if tail else ''}; nothing was shipped: correct the job "
                        f"(pilothouse job update {job}) so it is built again on the new {base}")
    return {"level": "full", "passed": True, "reason": res.reason, "duration_s": res.duration_s}


def ship(layout: RepoLayout, project: ProjectConfig, job: str, head: str, merges: list[tuple[str, str, str]], *,
         message: str, branch: str | None = None, how: str = "job", extra: Callable[[Path], None] | None = None,
         own: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict[str, Any]:
    """Put the change of `head` (the job's line at its acceptance) onto the base branch, or onto a
    new branch `branch`. `merges`: (merge commit, task, commit message) of the job's tasks, oldest
    first, for `per-task`; `message`: the job's commit message (`job`, `history`); `extra(wt)`:
    writes and stages files that go into the last commit (the job's record); `own`: those files'
    paths, which the operator's checkout may hold changed by pilothouse itself (the record's
    accepted state) and which landing replaces. Returns {mode, base, target, previous, new,
    regated, gate}."""
    if how not in HOWS:
        raise UserError(f"ship: unknown way {how!r}: one of {', '.join(HOWS)}")
    base = base_branch(layout, project)
    start = git(layout.root, "rev-parse", "--verify", f"refs/heads/{base}^{{commit}}")
    if branch is not None:
        if not git_ok(layout.root, "check-ref-format", "--branch", branch) or branch.startswith("-"):
            raise UserError(f"--branch {branch!r} is not a valid branch name")
        if branch_exists(layout.root, branch):
            raise UserError(f"--branch {branch}: that branch exists already: pick a new name")
    already = {"mode": "already", "base": base, "target": branch or base, "previous": start, "new": start,
               "regated": False, "gate": None}
    if git_ok(layout.root, "merge-base", "--is-ancestor", head, start):
        return already
    # the base branch still is where the job's line left it: the line's tree is the one gated
    unmoved = git_ok(layout.root, "merge-base", "--is-ancestor", start, head)
    new: str | None
    if how == "job":
        new = _one_commit(layout, start, head, message, job, base, extra)
    elif how == "per-task":
        new = _task_commits(layout, start, merges, job, base, extra)
    elif unmoved and extra is None:
        new = head
    else:
        new = _merge_commit(layout, start, head, message, job, base, extra)
    if new is None or new == start:
        return already
    mode = {"job": "one commit", "per-task": "per task", "history": "fast-forward" if new == head else "merge"}[how]
    gated_tree = git(layout.root, "rev-parse", f"{head}^{{tree}}")
    # a tree other than the gated one (the base moved on, or the record came with it) is gated
    # again, unless only pilothouse's own records differ
    changed = [p for p in git(layout.root, "diff", "--name-only", "-z", gated_tree, f"{new}^{{tree}}",
                              strip=False).split("\0") if p]
    regate = not unmoved or any(not p.startswith(".ai/") for p in changed)
    gate = _gate_again(layout, project, job, base, new, env) if regate else None
    if branch is not None:
        git(layout.root, "branch", branch, new)
        return {"mode": mode, "base": base, "target": branch, "previous": None, "new": new, "regated": regate,
                "gate": gate}
    _land(layout, base, start, new, job, own)
    return {"mode": mode, "base": base, "target": base, "previous": start, "new": new, "regated": regate,
            "gate": gate}


def _land(layout: RepoLayout, base: str, start: str, new: str, job: str, own: tuple[str, ...] = ()) -> None:
    """Move the base branch from `start` to `new` (a descendant). `own`: pilothouse's records, whose
    new content the commit carries (built from the checkout's own): their local change is no clash."""
    checkout = checkout_of(layout, base)
    if checkout is None:
        try:
            git(layout.root, "update-ref", "-m", f"pilothouse ship {job}", f"refs/heads/{base}", new, start)
        except GitError as exc:
            raise UserError(f"{base} moved while shipping ({exc.stderr.strip()}): ship again") from None
        return
    touched = set(git(layout.root, "diff", "--name-only", "-z", start, new, strip=False).split("\0")) - {""}
    dirty = dirty_paths(checkout)
    overlap = sorted(p for p in dirty if p in touched and p not in own)
    if overlap:
        raise UserError(f"your checkout {checkout} has uncommitted changes in {some_paths(overlap)}, which "
                        f"shipping job {job} would change: commit or stash them, then ship again "
                        f"(or ship --branch NAME)")
    saved = {p: (checkout / p).read_bytes() for p in own if p in touched and p in dirty and (checkout / p).is_file()}
    for p in saved:
        git(checkout, "checkout", "-q", "HEAD", "--", p)  # the commit carries its new content
    proc = git_run(checkout, *NO_HOOKS, "merge", "-q", "--ff-only", new)
    if proc.returncode != 0:
        for p, content in saved.items():
            (checkout / p).write_bytes(content)
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise UserError(f"could not fast-forward {base} in {checkout}: {detail[-1] if detail else 'git merge failed'}")
