"""The user's list of repositories that use pilothouse (`paths.repos_file()`, a JSON list).

The cockpit opens every registered repository; `pilothouse init` registers the one it runs in.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
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
