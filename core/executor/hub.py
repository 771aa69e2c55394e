"""The hub: a bare repository between the supervisor and the cluster's nodes.

The supervisor pushes a run's base there (`refs/pilothouse/base/<run>`); the run's node fetches
it, and pushes its work back (`refs/pilothouse/result/<run>`). What comes back is the worker's:
it is fetched with git's object checks on, must build on the base it was given, and reaches the
task's worktree as uncommitted changes, which the supervisor then commits exactly as a local
builder's (core/supervisor/flow.py: builder_done).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pilothouse.core.git.worktrees import GitError, git
from pilothouse.core.records.layout import RepoLayout
from pilothouse.providers.errors import UserError

# a hub is another party's repository: its hooks and the operator's never run for these pushes
_NO_HOOKS = ("-c", "core.hooksPath=/dev/null")


def base_ref(run_id: str) -> str:
    return f"refs/pilothouse/base/{run_id}"


def result_ref(run_id: str) -> str:
    return f"refs/pilothouse/result/{run_id}"


def hub_url(layout: RepoLayout, project: Any) -> str:
    """The hub as every node is told it: a relative path is the repository's (a node has no cwd of ours)."""
    url = str(project.ray.hub or (layout.ai / "hub.git"))
    return str((layout.root / url).resolve()) if is_path(url) and not os.path.isabs(url) else url


def is_path(url: str) -> bool:
    return "://" not in url and not (":" in url.split("/")[0] and not url.startswith("/"))


def ensure_hub(layout: RepoLayout, url: str) -> None:
    """Make the hub when it is a path that does not exist yet (the default, inside .ai/)."""
    import fcntl

    if not is_path(url):
        return
    path = Path(url) if os.path.isabs(url) else layout.root / url
    if (path / "HEAD").exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # the first runs of a job are sent at once, each from a thread of its own: one makes the hub (the
    # lock is on the folder it goes in, so no lock file shows in the operator's `git status`). It is
    # made aside and renamed into place: `git init` writes HEAD before refs/ and objects/, and a
    # sender that checks HEAD without the lock must never push into a half-made repository
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        if not (path / "HEAD").exists():
            import shutil
            import tempfile

            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
            try:
                git(path.parent, "init", "-q", "--bare", str(aside))
                os.chmod(aside, 0o777 & ~_umask())  # as `git init` makes it in place (mkdtemp's is 0700)
                os.rename(aside, path)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
        if path.resolve().is_relative_to(layout.root.resolve()):
            _exclude(layout, "/" + str(path.resolve().relative_to(layout.root.resolve())) + "/")
    finally:
        os.close(folder)


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _exclude(layout: RepoLayout, pattern: str) -> None:
    """Keep the hub out of the operator's `git status` (it is no record)."""
    exclude = Path(git(layout.root, "rev-parse", "--git-path", "info/exclude"))
    exclude = exclude if exclude.is_absolute() else layout.root / exclude
    text = exclude.read_text() if exclude.exists() else ""
    if pattern not in text.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text(text + ("" if not text or text.endswith("\n") else "\n") + pattern + "\n")


def push_base(layout: RepoLayout, url: str, sha: str, run_id: str) -> None:
    git(layout.root, *_NO_HOOKS, "push", "-q", "--force", url, f"{sha}:{base_ref(run_id)}")


def publish_base(layout: RepoLayout, url: str, sha: str, run_id: str) -> None:
    """The run's base into the hub (made first when it is a path not there yet); one line naming
    ray.hub when the hub cannot take it."""
    try:
        ensure_hub(layout, url)
        push_base(layout, url, sha, run_id)
    except (GitError, OSError) as exc:
        raise UserError(f"ray.hub in .ai/project.yaml: the hub {url} cannot take the run's base ({why(exc)}); "
                        "make it a bare repository this machine and every node can write (git init --bare "
                        "PATH), or leave ray.hub out for <repo>/.ai/hub.git") from None


def why(exc: BaseException) -> str:
    """git's own reason, its first line (the rest is advice about access rights)."""
    text = exc.stderr if isinstance(exc, GitError) else str(exc)
    return next((line.removeprefix("fatal: ") for line in text.splitlines() if line.strip()), type(exc).__name__)


def fetch_result(layout: RepoLayout, url: str, run_id: str) -> str | None:
    """The run's pushed commit, fetched into the repository (None when it pushed none)."""
    local = f"refs/pilothouse/remote/{run_id}"
    try:
        git(layout.root, "-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true", "fetch", "-q",
            "--no-tags", "--no-write-fetch-head", url, f"+{result_ref(run_id)}:{local}")
    except GitError as exc:
        if "couldn't find remote ref" in exc.stderr:
            return None
        raise
    return git(layout.root, "rev-parse", "--verify", "-q", f"{local}^{{commit}}").strip()


def apply_result(worktree: str, base: str, sha: str) -> None:
    """The run's work, as uncommitted changes in the task's worktree (which sits at `base`)."""
    if git(worktree, "rev-parse", "HEAD").strip() != base:
        raise GitError(["apply"], 1, f"the task's worktree moved off the run's base {base[:12]}")
    parent = git(worktree, "rev-parse", "--verify", "-q", f"{sha}^").strip() if sha != base else base
    if parent != base:
        raise GitError(["apply"], 1, f"the run's commit {sha[:12]} does not sit on its base {base[:12]}")
    git(worktree, "read-tree", "-u", "--reset", sha)
    git(worktree, "reset", "-q")  # the index back at the base: the changes are the worker's, unstaged


def drop_refs(layout: RepoLayout, url: str, run_id: str) -> None:
    """The run is collected: its refs leave the hub and the repository (best effort)."""
    git(layout.root, *_NO_HOOKS, "push", "-q", url, f":{base_ref(run_id)}", f":{result_ref(run_id)}", check=False)
    git(layout.root, "update-ref", "-d", f"refs/pilothouse/remote/{run_id}", check=False)
