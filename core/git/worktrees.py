"""Task worktrees: one per builder, outside the repository, on branch `ph/<job>/<task>`.

Everything goes through the git CLI (a subprocess costs less than importing GitPython, and the
CLI's messages are what we show). Worktrees are fresh checkouts: ignored directories such as
`.venv` or `node_modules` are never copied or linked in; setup builds them per worktree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pilothouse.core.records.layout import RepoLayout, worktrees_base
from pilothouse.providers.errors import UserError

BRANCH_PREFIX = "ph/"
# Tool caches a worker or a gate leaves behind in a repo without a .gitignore; never committed,
# never counted as "the gate changed files".
SCRATCH_PATTERNS = ("__pycache__/", "*.pyc", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
                    ".coverage", "node_modules/", ".venv/", ".tox/", ".DS_Store")
_MIN_FREE_MB_DEFAULT = 64  # below this, `git worktree add` would leave a half-written checkout


class GitError(Exception):
    def __init__(self, args: list[str], returncode: int, stderr: str) -> None:
        self.argv, self.returncode, self.stderr = args, returncode, stderr.strip()
        super().__init__(f"git {' '.join(args)} failed ({returncode}): {self.stderr}")


class WorktreeError(UserError):
    """A task's worktree cannot be created or removed; the message says why and what to do."""


# Every git pilothouse runs on the host may run in a tree a worker wrote. A repository the worker
# nested in it (`sub/.git`, staged as a gitlink) has a config of the worker's: `status` and `diff`
# would run git inside it, and its `core.fsmonitor` command with it, unconfined. So git never looks
# into submodules, and never starts an fsmonitor (both settings reach git's child processes).
# Nor does each commit and merge start `git maintenance run --auto` (a process per call on the path
# from a verdict to the next launch): the supervisor runs git's housekeeping once per merge train,
# beside the work (core/supervisor/merging.housekeeping).
SAFE_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "diff.ignoreSubmodules=all", "-c", "maintenance.auto=false")


def git(cwd: Path | str, *args: str, check: bool = True, env: dict[str, str] | None = None,
        strip: bool = True) -> str:
    """Run git in `cwd`; stdout stripped (keep `strip=False` for porcelain status, whose lines may
    start with a space). Raises GitError (with git's stderr) when `check`."""
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    for attempt in range(4):
        proc = subprocess.run([*SAFE_GIT, *args], cwd=cwd, capture_output=True, text=True, env=full_env,
                              stdin=subprocess.DEVNULL)
        # another git (the operator's, or a parallel worktree add) holds a ref or index lock, or is
        # half-way through writing a sibling worktree's admin dir: both pass after a brief wait
        transient = ".lock': File exists" in proc.stderr or "failed to read .git/worktrees/" in proc.stderr
        if proc.returncode == 0 or not transient or attempt == 3:
            break
        time.sleep(0.05 * (attempt + 1))
    if check and proc.returncode != 0:
        raise GitError(list(args), proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout.strip() if strip else proc.stdout


def git_run(cwd: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run git and return the completed process (for callers that need the exit code and stderr)."""
    return subprocess.run([*SAFE_GIT, *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def git_ok(cwd: Path | str, *args: str) -> bool:
    return subprocess.run([*SAFE_GIT, *args], cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL).returncode == 0


def is_scratch(path: str) -> bool:
    parts = path.rstrip("/").split("/")
    for pat in SCRATCH_PATTERNS:
        if pat.endswith("/"):
            if pat[:-1] in parts:
                return True
        elif pat.startswith("*."):
            if parts[-1].endswith(pat[1:]):
                return True
        elif parts[-1] == pat:
            return True
    return False


def _scratch_pathspecs() -> list[str]:
    out = []
    for pat in SCRATCH_PATTERNS:
        out.append(f":(exclude,glob)**/{pat.rstrip('/')}" + ("/**" if pat.endswith("/") else ""))
    return out


INTEGRATION_DIR = "_integration"  # the jobs' integration checkouts' folder under worktree_root (one per job)


def worktree_root(layout: RepoLayout) -> Path:
    """Per-repository folder for its worktrees, outside the repository (user data dir)."""
    resolved = str(layout.root.resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:8]
    return worktrees_base() / f"{layout.root.name}-{digest}"


def some_paths(paths: list[str], limit: int = 5) -> str:
    """The first few of a checkout's paths, for a one-line message."""
    return ", ".join(paths[:limit]) + (" …" if len(paths) > limit else "")


def task_branch(job: str, task: str) -> str:
    return f"{BRANCH_PREFIX}{job}/{task}"


def branch_exists(cwd: Path | str, branch: str) -> bool:
    return git_ok(cwd, "rev-parse", "--verify", "-q", f"refs/heads/{branch}")


def _check_free_space(where: Path) -> None:
    probe = where
    while not probe.exists():
        probe = probe.parent
    try:
        min_mb = int(os.environ.get("PILOTHOUSE_MIN_FREE_MB") or _MIN_FREE_MB_DEFAULT)
    except ValueError:
        min_mb = _MIN_FREE_MB_DEFAULT
    free = shutil.disk_usage(probe).free
    if free < min_mb * 1024 * 1024:
        raise WorktreeError(f"disk full: {free // (1024 * 1024)} MB free under {probe}; free some space "
                            "(pilothouse maintain worktrees list shows old worktrees)")


def checkout_of(layout: RepoLayout, branch: str) -> Path | None:
    """The checkout (the main one or any worktree) that has `branch` checked out, or None."""
    current = None
    for line in git(layout.root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree "):])
        elif line == f"branch refs/heads/{branch}" and current is not None:
            return current
    return None


def dirty_paths(checkout: Path) -> list[str]:
    """Paths with uncommitted changes in `checkout` (a rename names both sides), scratch files left out."""
    out = git(checkout, "status", "--porcelain=v1", "-z", "--untracked-files=all", strip=False)
    paths = []
    entries = iter(out.split("\0"))
    for e in entries:
        if len(e) > 3:
            paths.append(e[3:])
            if e[0] in "RC":  # a rename's source follows as its own entry
                paths.append(next(entries, ""))
    return [p for p in paths if p and not is_scratch(p)]


def _existing_worktree(layout: RepoLayout, branch: str) -> Path | None:
    for wt in list_worktrees(layout):
        if wt["branch"] == branch and Path(wt["path"]).is_dir():
            return Path(wt["path"])
    return None


def create_worktree(layout: RepoLayout, job: str, task: str, base_ref: str, *,
                    reuse: bool = False, adopt: bool = False) -> tuple[Path, str]:
    """Create the task's worktree on a new branch from `base_ref`; returns (path, branch).

    With `reuse`, an existing worktree of that branch is returned as is (a retried task keeps
    its work); with `adopt` (the branch is known to be this task's own), an existing branch that
    no worktree holds gets a new one, its commits kept. Otherwise an existing branch is an
    error, never silently reset.
    """
    branch = task_branch(job, task)
    path = worktree_root(layout) / job / task
    # one git call on the usual path (a new task): `worktree add -b` itself refuses an existing
    # branch before writing anything, and only then do we look for what exists
    if path.exists():
        if reuse and (found := _existing_worktree(layout, branch)) is not None:
            return found, branch
        git(layout.root, "worktree", "prune", check=False)
        if path.exists() and any(path.iterdir()):
            raise WorktreeError(f"{path} already exists and is not a worktree of {branch}: remove it "
                                f"(pilothouse maintain worktrees remove {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_free_space(path.parent)
    existed = branch_exists(layout.root, branch)  # ours or not, if our own add fails half-way
    try:
        git(layout.root, "worktree", "add", "-q", "-b", branch, str(path), base_ref)
    except GitError as exc:
        if "No space left" in exc.stderr:
            raise WorktreeError(f"disk full while creating {path}: free some space and retry the task") from None
        if branch_exists(layout.root, branch):
            if reuse and (found := _existing_worktree(layout, branch)) is not None:
                return found, branch
            if not existed and _attach_fresh_branch(layout, branch, path, base_ref):
                return path, branch
            if adopt and _existing_worktree(layout, branch) is None:
                git(layout.root, "worktree", "prune", check=False)
                if git_run(layout.root, "worktree", "add", "-q", str(path), branch).returncode == 0:
                    return path, branch
            raise WorktreeError(f"branch {branch} already exists (an earlier attempt?): inspect it with "
                                f"`git log {branch}`, then delete it (git branch -D {branch}) and retry the "
                                "task") from None
        if "invalid reference" in exc.stderr or "not a valid" in exc.stderr:
            raise WorktreeError(f"cannot create {branch}: base {base_ref!r} does not exist") from None
        raise WorktreeError(f"cannot create the worktree for {branch}: {exc.stderr}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise WorktreeError(f"disk full while creating {path}: free some space and retry the task") from None
        raise
    return path, branch


def _attach_fresh_branch(layout: RepoLayout, branch: str, path: Path, base_ref: str) -> bool:
    """Finish our own `worktree add -b` that lost a race with a parallel git after creating the
    branch: it is still at the base commit and no worktree holds it, so attaching loses nothing.
    (A branch that existed before the attempt never comes here: that stays an error.)"""
    tip = git(layout.root, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}", check=False)
    base = git(layout.root, "rev-parse", "--verify", "-q", f"{base_ref}^{{commit}}", check=False)
    if not tip or tip != base or _existing_worktree(layout, branch) is not None:
        return False
    git(layout.root, "worktree", "prune", check=False)
    return git_run(layout.root, "worktree", "add", "-q", str(path), branch).returncode == 0


def remove_worktree(layout: RepoLayout, path: Path | str, *, delete_branch: bool = False,
                    force: bool = False) -> None:
    """Remove one of pilothouse's worktrees (its branch is kept unless asked: it may hold unmerged commits).

    Only a task's checkout (root/<job>/<task> on its ph/ branch) or the integration checkout of this
    repository: anything else may be the operator's own checkout or plain files. Uncommitted work
    in it is refused unless `force` (a finished job's cleanup passes it)."""
    path = Path(path).absolute()
    real, root = path.resolve(), worktree_root(layout).resolve()
    if real == layout.root.resolve():
        raise WorktreeError(f"{path} is the repository's own checkout, not a task worktree")
    not_ours = WorktreeError(f"{path} is not a pilothouse worktree of this repository "
                             "(see: pilothouse maintain worktrees list)")
    # a task's checkout is root/<job>/<task>, a job's integration checkout root/_integration/<job>:
    # nothing else under the root (a job's folder holds every task of the job) is removed whole
    place = real.relative_to(root).parts if real.is_relative_to(root) else ()
    if len(place) != 2 and place != (INTEGRATION_DIR,):
        raise not_ours
    listed = [wt for wt in list_worktrees(layout) if Path(wt["path"]).resolve() == real]
    if not listed and not path.exists():
        raise WorktreeError(f"{path}: no such worktree (see: pilothouse maintain worktrees list)")
    branch = listed[0]["branch"] if listed else None
    if place[0] == INTEGRATION_DIR:
        ours = branch is None or (branch.endswith(f"/{place[-1]}") and not branch.startswith("ph/"))
    else:
        ours = branch in (None, task_branch(*place))
    if listed and len(place) == 2 and not ours:
        raise not_ours  # a checkout someone made by hand in our folder, on a branch of their own
    if not listed and not ((path / ".git").is_file() or not any(path.iterdir())):
        raise not_ours  # only a creation cut short (a .git file git no longer knows) or an empty folder
    if listed and not force and path.exists():
        try:
            dirty = dirty_paths(path)
        except GitError:  # not a usable checkout any more: nothing in it git could keep
            dirty = []
        if dirty:
            raise WorktreeError(f"{path} has uncommitted changes ({some_paths(dirty)}): commit or copy them first, "
                                "or pass --force to discard them")
    try:
        git(layout.root, "worktree", "remove", "--force", "--force", str(path))
    except GitError as exc:
        if path.exists() and "is not a working tree" not in exc.stderr:
            raise WorktreeError(f"cannot remove worktree {path}: {exc.stderr}") from None
        if path.exists():  # left over from a creation cut short: git no longer knows it
            shutil.rmtree(path)
    git(layout.root, "worktree", "prune", check=False)
    if delete_branch and branch:
        git(layout.root, "branch", "-D", branch, check=False)


def list_worktrees(layout: RepoLayout, *, all_worktrees: bool = False) -> list[dict[str, Any]]:
    """pilothouse's worktrees of this repository (or every worktree): path, branch, head, job, task."""
    out = git(layout.root, "worktree", "list", "--porcelain")
    root = worktree_root(layout).resolve()
    result: list[dict[str, Any]] = []
    for block in out.split("\n\n"):
        info: dict[str, Any] = {"path": None, "branch": None, "head": None, "job": None, "task": None}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            if key == "worktree":
                info["path"] = value
            elif key == "HEAD":
                info["head"] = value
            elif key == "branch":
                info["branch"] = value.removeprefix("refs/heads/")
        if not info["path"]:
            continue
        inside = Path(info["path"]).resolve().is_relative_to(root)
        if not (inside or all_worktrees):
            continue
        m = re.fullmatch(r"ph/([^/]+)/(.+)", info["branch"] or "")
        place = Path(info["path"]).resolve().relative_to(root).parts if inside else ()
        if m:
            info["job"], info["task"] = m.group(1), m.group(2)
        elif len(place) == 2 and place[0] == INTEGRATION_DIR:
            info["job"] = place[1]  # the job's integration checkout (task None)
        result.append(info)
    return result


def remove_job_worktrees(layout: RepoLayout, job: str) -> list[str]:
    removed = []
    for wt in list_worktrees(layout):
        if wt["job"] == job:
            remove_worktree(layout, wt["path"], force=True)  # the job is over: its scratch goes too
            removed.append(wt["path"])
    return removed
