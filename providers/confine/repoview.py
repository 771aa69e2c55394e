"""What of the repository a run sees: its worktree's git dirs, read-only, and never the rest of
the operator's checkout (untracked files such as `.env`), plus what the project's `sandbox.read`
setting adds on purpose (docs/sandbox.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pilothouse.providers.runners.base import RunSpec


def real(p: Path | str) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(p))))


def within(child: Path, parent: Path) -> bool:
    # string prefixes: Path.is_relative_to re-parses both paths, and the plan asks this thousands of times
    c, p = str(child), str(parent)
    return c == p or c.startswith(p if p.endswith("/") else p + "/")


def git_paths(workdir: Path) -> tuple[list[Path], list[Path]]:
    """(read-only paths inside the worktree, read-only git dirs outside it) for git to work read-only."""
    dotgit = workdir / ".git"
    inside = [dotgit] if dotgit.exists() else []
    outside: list[Path] = []
    if dotgit.is_file():
        from pilothouse.providers import workerfs

        m = re.match(r"gitdir:\s*(.+)", workerfs.read(workdir, ".git", 4096).text().strip())
        if m:
            gitdir = real(workdir / m.group(1).strip())
            outside.append(gitdir)
            common = gitdir / "commondir"
            if common.is_file():
                outside.append(real(gitdir / common.read_text().strip()))
    return inside, outside


def main_checkout(workdir: Path, git_outside: list[Path]) -> Path | None:
    """The operator's checkout a linked worktree belongs to (the parent of its common .git dir).

    Only its git dir is any run's business: the rest holds the operator's untracked files (`.env`,
    local notes, a venv with their credentials in its config) that no worker or gate may read.
    None when the run works in that checkout itself, or the repository is bare."""
    common = git_outside[-1] if git_outside else None
    if common is None or common.name != ".git":
        return None
    main = common.parent
    if within(workdir, main) or within(main, workdir):
        return None
    return main


def read_setting(spec: RunSpec, main: Path | None) -> list[Path]:
    """`sandbox.read` of the project (in the run's settings as `sandbox_read`): extra paths to bind
    read-only, as real paths; relative ones are the main checkout's."""
    from pilothouse.providers.errors import UserError

    raw = spec.extra.get("sandbox_read") or []
    base = main if main is not None else real(spec.workdir)
    out: list[Path] = []
    for entry in raw:
        p = Path(os.path.expanduser(str(entry)))
        if p.is_absolute():
            out.append(real(p))
            continue
        target = real(base / p)
        # the checkout holds merged work: a relative entry turned into a link must not carry the
        # bind out of it (say `tools -> ~/.ssh`)
        if not within(target, base):
            raise UserError(f"sandbox.read in .ai/project.yaml: {entry} leads out of {base} (to {target}); "
                            "name the target itself if it is meant")
        out.append(target)
    return out


def protected_paths(spec: RunSpec, workdir: Path) -> list[Path]:
    """`gates.protected` of the project (in the run's settings as `protected`): what its globs match
    in the worktree now, to bind read-only over the writable worktree. The tree is the worker's: a
    match reached through a link is left out (binding it would protect, or expose, its target)."""
    out: list[Path] = []
    for pattern in spec.extra.get("protected") or []:
        if not isinstance(pattern, str) or pattern.startswith("/") or ".." in Path(pattern).parts:
            continue
        for p in workdir.glob(pattern):
            if real(p) == workdir / p.relative_to(workdir):  # no link on the way
                out.append(p)
    return out


def holdout_path(spec: RunSpec, main: Path | None) -> Path | None:
    """`gates.holdout` (in the run's settings as `holdout`): the operator's folder of tests no worker
    may read, in the main checkout; hidden in every sandbox, whatever its mode."""
    raw = spec.extra.get("holdout")
    if not isinstance(raw, str) or not raw.strip("/ ") or raw.startswith("/") or ".." in Path(raw).parts:
        return None
    base = main if main is not None else real(spec.workdir)
    target = real(base / raw)
    return target if within(target, base) and target.is_dir() else None
