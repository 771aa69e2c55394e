"""What keeps a supervisor from working at all — its store deleted, replaced or damaged under
it, a full or read-only disk — and the one line it stops with; and the event-log lines every
reader skips, counted once at its start."""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store

_DAMAGE = ("malformed", "not a database", "no such table", "disk I/O error")


def store_identity(layout: RepoLayout) -> tuple[int, int]:
    st = os.stat(layout.state_db)
    return st.st_dev, st.st_ino


def lost_store(layout: RepoLayout, identity: tuple[int, int]) -> str | None:
    """Why the store the supervisor opened is no longer the repository's, or None. Anything it
    wrote next would land in a file nobody reads."""
    try:
        if store_identity(layout) == identity:
            return None
        what = "replaced"
    except FileNotFoundError:
        what = "deleted"
    return f"{layout.state_db} was {what} while the supervisor ran, so it stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


def damaged_store(layout: RepoLayout, exc: BaseException) -> str | None:
    """The line to stop with when `exc` says the store itself is damaged, or None."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    if not isinstance(exc, store.StateDamaged) and not any(w in str(exc) for w in _DAMAGE):
        return None
    return f"{layout.state_db} is damaged ({exc}), so the supervisor stopped: {store.REPAIR}, then " \
           "`pilothouse job start`"


def unreadable_lines(layout: RepoLayout, data: dict[str, Any]) -> str | None:
    """Count the log's lines that are not events (every reader skips them) into `data`; the
    sentence saying so, or None. Nothing in the log's content may keep a supervisor from starting."""
    from pilothouse.core.state.events import EventTailer

    tailer = EventTailer(layout.events)
    for _ in tailer.iter_new():
        pass
    if tailer.skipped:
        data["skipped_lines"] = tailer.skipped
    return tailer.skip_notice()


def exit_on_disk_error(exc: Exception) -> int:
    """A full or read-only disk ends the supervisor with one line naming the path (exit 1);
    anything else is a bug and is raised again with its traceback."""
    from pilothouse.providers.errors import disk_error_line

    line = disk_error_line(exc)
    if line is None:
        raise exc
    print(f"pilothouse: {line}", file=sys.stderr)
    return 1
