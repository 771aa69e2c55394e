"""The user's list of repositories that use pilothouse (`paths.repos_file()`, a JSON list).

The cockpit opens every registered repository; `pilothouse init` registers the one it runs in.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from pilothouse.providers import paths
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


def register_repo(path: Path | str) -> bool:
    """Add a repository (resolved path) to the list; False when it was already there."""
    target = Path(path).resolve()
    file = paths.repos_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    # two `init`s at once must not drop each other's entry
    with open(file.with_name(file.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        current = list_repos()
        if target in current:
            return False
        atomic_write_json(file, [str(p) for p in [*current, target]])
        return True


def unregister_repo(path: Path | str) -> bool:
    target = Path(path).resolve()
    file = paths.repos_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file.with_name(file.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        current = list_repos()
        if target not in current:
            return False
        atomic_write_json(file, [str(p) for p in current if p != target])
        return True
