"""What one checkout holds: its HEAD, branch and uncommitted paths, what a branch changed since its
base, and committing a worker's work in it (core/git/worktrees.py makes and removes the checkouts)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from pilothouse.core.git.worktrees import (
    SAFE_GIT,
    GitError,
    _scratch_pathspecs,
    git,
    git_ok,
    git_run,
    is_scratch,
)

# Never committed from a worker's tree: .ai is pilothouse's (its settings are the operator's, a
# worker that rewrites the gates must not get them merged; the task graph, job records and skills
# are the host's records; runtime state is no record). core/git/records.py puts it back first.
_NOT_WORK = (":(exclude,top).ai",)


def stage_work(path: Path | str) -> None:
    """Stage what a worker changed: everything but tool caches and pilothouse's own files."""
    git(path, "add", "-A", "--", ".", *_scratch_pathspecs(), *_NOT_WORK)


def commit_all(path: Path | str, message: str, what: str = "the builder's work") -> str | None:
    """Commit everything in the worktree except tool caches and pilothouse's own files (.ai: the
    callers put it back first with core/git/records.restore_records); the new sha, or None if
    nothing changed. Work that carries a credential is unstaged again and raises
    SecretInDiff (core/git/leaks.py): `what` names whose work it is in that message."""
    from pilothouse.core.git.leaks import SecretInDiff, check_staged

    stage_work(path)
    try:
        check_staged(path, what, message)
    except SecretInDiff:
        git(path, "reset", "-q", check=False)  # the files stay in the worktree for the operator to see
        raise
    # no `diff --cached --quiet` first: a commit with nothing staged fails, and only then do we ask why
    proc = git_run(path, "-c", "core.hooksPath=/dev/null", "commit", "-q", "--no-verify", "-m", message)
    if proc.returncode != 0:
        if git_ok(path, "diff", "--cached", "--quiet"):
            return None
        raise GitError(["commit"], proc.returncode, proc.stderr or proc.stdout)
    return head(path)


def checkout_state(path: Path | str) -> tuple[str, str | None, list[str]] | None:
    """(HEAD sha, checked-out branch or None when detached, dirty paths except tool caches) in one
    git call; None when `path` is not a usable checkout."""
    state = checkout_status(path)
    return None if state is None else (state[0], state[1], state[2])


def checkout_status(path: Path | str, *, apart: bool = False) -> tuple[str, str | None, list[str], list[str]] | None:
    """checkout_state and, last, the tool caches left untracked (what `git clean` would take).
    `apart`: untracked files are listed by a second git beside the status of tracked ones: on a
    100,000-file checkout each walk takes about 0.1 s, and two cores take both at once."""
    status = ("status", "--porcelain=v2", "--branch", "-z", "--no-renames")
    if not apart:
        proc = git_run(path, *status, "--untracked-files=all")
        if proc.returncode != 0:
            return None
        out = proc.stdout
    else:
        others = subprocess.Popen([*SAFE_GIT, "ls-files", "-z", "--others", "--exclude-standard"], cwd=path,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  text=True)
        proc = git_run(path, *status, "--untracked-files=no")
        listed, _ = others.communicate()
        if proc.returncode != 0 or others.returncode != 0:
            return None
        out = proc.stdout + "".join(f"? {p}\0" for p in listed.split("\0") if p)
    head_sha, branch = "", None
    dirty: list[str] = []
    scratch: list[str] = []
    for entry in out.split("\0"):
        if entry.startswith("# branch.oid "):
            head_sha = entry[len("# branch.oid "):]
        elif entry.startswith("# branch.head "):
            name = entry[len("# branch.head "):]
            branch = None if name == "(detached)" else name
        elif entry[:2] in ("1 ", "u ", "? "):
            # ordinary entries have 8 fields before the path, unmerged ones 10, untracked none
            fields = {"1": 8, "u": 10, "?": 1}[entry[0]]
            p = entry.split(" ", fields)[-1]
            (scratch if is_scratch(p) else dirty).append(p)
    if len(head_sha) < 40:
        return None  # "(initial)": no commit yet
    return head_sha, branch, dirty, scratch


def head(path: Path | str) -> str:
    return _head_from_files(Path(path)) or git(path, "rev-parse", "HEAD")


_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def _head_from_files(path: Path) -> str | None:
    """HEAD's commit read from git's own files, without a git process (a few ms under load, on the
    path from a builder's verdict to its merge); None whenever that is not plainly possible: a
    packed or reftable ref, a symbolic ref chain, anything unexpected — then git is asked."""
    dotgit = path / ".git"
    try:
        if dotgit.is_file():
            m = re.match(r"gitdir:\s*(.+)", dotgit.read_text().strip())
            if not m:
                return None
            gitdir = (path / m.group(1).strip()).resolve()
            common_file = gitdir / "commondir"
            common = (gitdir / common_file.read_text().strip()).resolve() if common_file.is_file() else gitdir
        elif dotgit.is_dir():
            gitdir = common = dotgit
        else:
            return None
        value = (gitdir / "HEAD").read_text().strip()
        if value.startswith("ref: refs/heads/"):
            # a loose ref is authoritative over packed-refs (git writes updated refs loose)
            value = (common / value[len("ref: "):]).read_text().strip()
    except OSError:
        return None
    return value if _SHA.fullmatch(value) else None


def changed_files(path: Path | str, base: str, *, uncommitted: bool = False) -> list[str]:
    """Files the branch changed since it left `base` (merge-base), optionally with uncommitted ones."""
    names = git(path, "diff", "--name-only", "-z", f"{base}...HEAD").split("\0")
    files = {n for n in names if n}
    if uncommitted:
        files.update(n for n in git(path, "diff", "--name-only", "-z", "HEAD").split("\0") if n)
        files.update(n for n in git(path, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
                     if n and not is_scratch(n))
    return sorted(files)


def diff_stat(path: Path | str, base: str) -> dict[str, Any]:
    """{files, insertions, deletions, text} of the branch against its merge-base with `base`."""
    text = git(path, "diff", "--shortstat", f"{base}...HEAD")
    nums = {"files": 0, "insertions": 0, "deletions": 0}
    for n, word in re.findall(r"(\d+) (file|insertion|deletion)", text):
        nums[{"file": "files", "insertion": "insertions", "deletion": "deletions"}[word]] = int(n)
    return {**nums, "text": text}


def ahead_count(path: Path | str, base: str) -> int:
    """Commits on HEAD not on `base` (0: the builder committed nothing)."""
    return int(git(path, "rev-list", "--count", f"{base}..HEAD") or 0)
