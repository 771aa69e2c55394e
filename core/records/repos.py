"""The user's list of repositories that use pilothouse (`paths.repos_file()`, a JSON list).

The cockpit opens every registered repository; `pilothouse init` registers the one it runs in.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.fsutil import atomic_write_json


def list_repos() -> list[Path]:
    """Registered repositories, in registration order (missing ones included: the caller decides)."""
    try:
        raw = json.loads(paths.repos_file().read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return []
    if not isinstance(raw, list):
        return []
    out: list[Path] = []
    for item in raw:
        value = item.get("path") if isinstance(item, dict) else item
        if isinstance(value, str) and value:
            out.append(Path(value))
    return out


def check_writable() -> None:
    """Refuse now what register_repo would fail on later: `init` checks everything before it
    writes anything, so a refusal never leaves a half-set-up repository."""
    file = paths.repos_file()
    if file.is_dir():
        raise UserError(f"{file} is a directory, not the repository list: remove it")
    for p in (file.parent, *file.parent.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            raise UserError(f"{p} is a file, not a directory: move it away (pilothouse keeps its "
                            f"repository list in {file.parent})")
        if not os.access(p, os.W_OK | os.X_OK):
            raise UserError(f"{p} is not writable: fix its permissions (pilothouse keeps its repository "
                            f"list in {file.parent})")
        return


def register_repo(path: Path | str) -> bool:
    """Add a repository (resolved path) to the list; False when it was already there."""
    target = Path(path).resolve()
    return _change(lambda current: None if target in current else [*current, target])


def unregister_repo(path: Path | str) -> bool:
    target = Path(path).resolve()
    return _change(lambda current: [p for p in current if p != target] if target in current else None)


def _change(edit: Callable[[list[Path]], list[Path] | None]) -> bool:
    """Rewrite the list as `edit` says (None: leave it); True when it was rewritten."""
    file = paths.repos_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    # two `init`s at once must not drop each other's entry
    with open(file.with_name(file.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        changed = edit(list_repos())
        if changed is None:
            return False
        atomic_write_json(file, [str(p) for p in changed])
        return True
