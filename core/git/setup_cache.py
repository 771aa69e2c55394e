"""`setup:` steps whose result is kept per lockfile: `{run, cache: {key, paths}}` runs its command
once for each content of its `key` files, keeps the `paths` it made in pilothouse's cache, and
copies them into the next worktree whose key files are the same instead of running it again.

The key is read from the worktree as git checked it out, before any builder ran there, through the
bounded reader that never follows a link; the command string is part of it. The copies (`cp -a`)
keep links as links, both ways: nothing in a kept folder is followed on the host. A folder is kept
only when no link leads to it (a `node_modules -> ~/.ssh` would otherwise be copied from where it
points). Alternative to `sandbox.share`, for tools that write into their folder while they run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.workerfs import read_in_tree

KEY_LIMIT = 64 << 20  # a lockfile larger than this is not one


def cache_key(cwd: Path, run: str, key: list[str]) -> str:
    h = hashlib.sha256(run.encode())
    for rel in key:
        entry = read_in_tree(cwd, rel, KEY_LIMIT)
        h.update(f"\0{rel}\0{entry.kind}\0".encode())
        if entry.kind == "file":
            h.update(entry.data)
    return h.hexdigest()[:40]


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)], check=True, capture_output=True)


def _unlinked(root: Path, rel: str) -> Path | None:
    """root/rel when it exists and no link is on the way to it, else None."""
    p = root / rel
    return p if os.path.lexists(p) and Path(os.path.realpath(p)) == p else None


def run_cached(step: Any, cwd: Path, run: Callable[[], Any], result: Callable[..., Any]) -> Any:
    """Run `step` (a SetupStep with a cache) in `cwd` through `run()`, or restore what it made.

    `result(passed, tail, duration)` builds the GateResult of a restore."""
    start = time.monotonic()
    cwd = Path(os.path.realpath(cwd))
    digest = cache_key(cwd, step.run, step.cache.key)
    kept = paths.cache_dir() / "setup" / digest
    if (kept / "complete").is_file():
        for rel in step.cache.paths:
            src = _unlinked(kept / "data", rel)
            # the worktree is the worker's: a folder on the way made a link would send the copy out of it
            on_way = [cwd / q for q in Path(rel).parents if str(q) != "."]
            if any(q.is_symlink() for q in on_way):
                continue
            if src is not None and not os.path.lexists(cwd / rel):
                _copy(src, cwd / rel)
        return result(True, f"setup cache: restored {', '.join(step.cache.paths)} ({digest[:12]})",
                      round(time.monotonic() - start, 3))
    res = run()
    if not res.passed:
        return res
    staging = kept.with_name(f"{digest}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        for rel in step.cache.paths:
            src = _unlinked(cwd, rel)
            if src is not None:
                _copy(src, staging / "data" / rel)
        (staging / "complete").write_text(step.run + "\n")
        os.replace(staging, kept)
    except (OSError, subprocess.CalledProcessError):
        pass  # another worktree kept the same key first, or the disk is full: this one still ran
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return res
