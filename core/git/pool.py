"""Finished task checkouts kept for the next task: a worker's checkout in O(change), not O(repository).

`git worktree add` writes every file of the repository for every task (seconds on a large one). A
merged task's checkout is instead detached, cleaned of everything untracked or ignored and moved into
`<worktree root>/_pool/`; the next task's checkout is a pooled one moved into place and switched to
its new branch at its base, which makes git rewrite only the files that differ.

On a 100,000-file checkout every git command that looks at each file costs about a tenth of a second,
so a pooled checkout is made ready when it is pooled (off the next task's path: switched to the
integration head, cleaned, its index path-compressed), and taking it costs one look at every file
(is anything uncommitted there?) and, when the base moved since, a two-tree `read-tree`.

The safety rules of worktree removal hold here too: a checkout with uncommitted work (anything but
tool caches) is never pooled, never reused and never removed by the pool. A pooled checkout was
written by a worker, so before git runs in it again it must still be the worktree git registered at
that place: its `.git` a plain file naming this repository's own administrative folder for it,
which names it back. Anything else is left where it is, unused (`maintain worktrees` lists it).
"""

from __future__ import annotations

import os
import uuid
from functools import lru_cache
from pathlib import Path

from pilothouse.core.git.checkout import checkout_status
from pilothouse.core.git.worktrees import (
    branch_exists,
    create_worktree,
    git,
    git_run,
    list_worktrees,
    task_branch,
    worktree_root,
)
from pilothouse.core.records.layout import RepoLayout

POOL_DIR = "_pool"


def pool_root(layout: RepoLayout) -> Path:
    return worktree_root(layout) / POOL_DIR


def pooled(layout: RepoLayout) -> list[Path]:
    """The pooled checkouts, oldest first."""
    root = pool_root(layout)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.stat().st_mtime)


def checkout_for(layout: RepoLayout, job: str, task: str, base_ref: str, *, keep: int, reuse: bool = False,
                 adopt: bool = False) -> tuple[Path, str, str]:
    """(path, branch, how) of the task's checkout: a pooled one for a new branch when one can be
    used (how "pooled"), else as `create_worktree` makes it ("new"; it keeps its rules for retried
    and adopted tasks)."""
    branch, path = task_branch(job, task), worktree_root(layout) / job / task
    if keep > 0 and not os.path.lexists(path) and not branch_exists(layout.root, branch):
        path.parent.mkdir(parents=True, exist_ok=True)
        if take(layout, path, branch, base_ref):
            return path, branch, "pooled"
    return (*create_worktree(layout, job, task, base_ref, reuse=reuse, adopt=adopt), "new")


def release(layout: RepoLayout, path: Path | str, job: str, task: str, keep: int, base: str | None = None) -> bool:
    """Pool a merged task's checkout instead of leaving it; False (and nothing changed) when it is
    not that task's checkout, holds uncommitted work, or the pool already keeps `keep`. `base`: the
    commit the next task will likely start from (the integration head), checked out now."""
    path = Path(path)
    if keep <= 0 or len(pooled(layout)) >= keep or not _is_registered(layout, path, task_branch(job, task)):
        return False
    if path.resolve() != (worktree_root(layout) / job / task).resolve():
        return False
    state = checkout_status(path, apart=True)
    if state is None or state[2]:
        return False  # uncommitted work stays where its owner left it
    if git_run(path, "checkout", "-q", "--detach", *([base] if base else [])).returncode != 0:
        return False
    # ready for the next task now rather than on its path: on its likely base, ignored files and
    # tool caches gone, the index written path-compressed (version 4: a quarter smaller to read and
    # write). Not git's untracked cache: it trusts a folder's stat to the second, so a file made in
    # the second after the cache was filled stays unseen (by the take's check, by a gate's snapshot)
    if (git_run(path, "clean", "-q", "-ffdx").returncode != 0
            or git_run(path, "update-index", "--index-version", "4").returncode != 0):
        return False
    pool_root(layout).mkdir(parents=True, exist_ok=True)
    return git_run(layout.root, "worktree", "move", str(path), str(pool_root(layout) / uuid.uuid4().hex[:12])
                   ).returncode == 0


def take(layout: RepoLayout, path: Path, branch: str, base_ref: str) -> bool:
    """Make `path` a checkout of the new `branch` at `base_ref` from a pooled checkout; False when
    none can be used (the caller then makes a new one)."""
    for candidate in pooled(layout):
        if not _is_registered(layout, candidate, None):
            continue
        state = checkout_status(candidate, apart=True)
        if state is None or state[2]:
            continue  # never reused: someone's work may be in it
        if git_run(layout.root, "worktree", "move", str(candidate), str(path)).returncode != 0:
            continue
        # tool caches that appeared since it was pooled must not stand in the way of the switch
        if ((not state[3] or git_run(path, "clean", "-q", "-ffdx").returncode == 0)
                and _switch(path, branch, base_ref, state[0])):
            return True
        # put back what could not be switched (a branch that appeared meanwhile, a bad base)
        git(layout.root, "worktree", "move", str(path), str(candidate), check=False)
        return False
    return False


def _switch(path: Path, branch: str, base_ref: str, head: str) -> bool:
    """`git checkout -q -b branch base_ref` in a checkout just found clean at `head`, without its
    look at every file first (the status just looked): nothing to rewrite when the pooled checkout
    already holds the base's tree (release() put it there), else a two-tree read-tree rewrites
    only what differs."""
    ref = f"refs/heads/{branch}"
    # the branch first, and only if it does not exist yet ("" as the old value): never taken over
    if git_run(path, "update-ref", "-m", f"branch: Created from {base_ref}", ref, f"{base_ref}^{{commit}}",
               "").returncode != 0:
        return False
    trees = git_run(path, "rev-parse", f"{head}^{{tree}}", f"{ref}^{{tree}}").stdout.split()
    same = len(trees) == 2 and trees[0] == trees[1]
    if ((same or git_run(path, "read-tree", "-m", "-u", "HEAD", ref).returncode == 0)
            and git_run(path, "symbolic-ref", "HEAD", ref).returncode == 0):
        return True
    git_run(path, "update-ref", "-d", ref)
    return False


def _is_registered(layout: RepoLayout, path: Path, branch: str | None) -> bool:
    """Whether `path` is a worktree git registered at that place, on `branch` (None: detached),
    whose `.git` still names its administrative folder, which names it back."""
    if path.is_symlink() or not path.is_dir():
        return False
    real = path.resolve()
    listed = [wt for wt in list_worktrees(layout) if Path(wt["path"]).resolve() == real]
    if len(listed) != 1 or listed[0]["branch"] != branch:
        return False
    dot_git = path / ".git"
    if dot_git.is_symlink() or not dot_git.is_file():
        return False
    try:
        text = dot_git.read_text(encoding="utf-8", errors="strict")[:4096].strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not text.startswith("gitdir: "):
        return False
    admin = Path(text[len("gitdir: "):])
    common = _common_dir(str(layout.root), _identity(layout.root / ".git"))
    if admin.is_symlink() or admin.resolve().parent != common / "worktrees":
        return False
    try:
        back = (admin / "gitdir").read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return os.path.realpath(back) == str(dot_git.resolve())


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@lru_cache(maxsize=64)
def _common_dir(root: str, identity: tuple[int, int] | None) -> Path:
    """The repository's administrative folder, asked of git once per repository (its `.git` the
    same file or folder): every pooling and every take looked it up again."""
    common = Path(git(root, "rev-parse", "--git-common-dir"))
    return (Path(root) / common).resolve() if not common.is_absolute() else common.resolve()
