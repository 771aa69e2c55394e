"""What can be wrong with state.db and how each is said: damaged or lost (`maintain repair` mends
it), held locked by another process (named, after a bounded wait), or on a full or read-only disk
(the machine's fault: repairing would not help). Each is a UserError of one line and an sqlite3
error, so a view that tolerates a store it cannot read goes on tolerating it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from pilothouse.providers.errors import UserError

REPAIR = "`pilothouse maintain repair` rebuilds it from .ai/ and events.jsonl"
# how long a reader waits for a writer's lock before it names the holder (a writer waits longer)
READ_WAIT_S = 5.0
WRITE_WAIT_S = 10.0


class StateDamaged(UserError, sqlite3.DatabaseError):
    """state.db cannot be used: missing where history says it existed, not a database, damaged, or
    from another version. A UserError (one line with what to run) and an sqlite3 error (so every
    view that already tolerates a store it cannot read goes on tolerating it)."""


class StateBusy(UserError, sqlite3.OperationalError):
    """Another process held state.db's lock longer than a reader waits: one line naming it."""


class StateDisk(UserError, sqlite3.OperationalError):
    """The disk under state.db is full or read-only: the store is fine, the machine is not."""


def disk_fault(path: Path, exc: BaseException) -> str | None:
    """One line for a store SQLite cannot open or write because its disk is full or read-only
    (not damage: repairing would not help), or None."""
    from pilothouse.providers.errors import disk_error_line

    text = str(exc)
    if not any(w in text for w in ("unable to open", "disk I/O", "readonly", "read-only", "full")) \
            and not isinstance(exc, OSError):
        return None  # the file's own fault (not a database, malformed): damage, whatever the disk
    folder = Path(path).parent
    try:
        vfs = os.statvfs(folder if folder.exists() else folder.parent)
    except OSError:
        vfs = None
    if (vfs is not None and vfs.f_flag & os.ST_RDONLY) or "readonly" in text or "read-only" in text:
        return (f"{path}: the file system is read-only ({text}; SQLite writes state.db-shm beside the store "
                "even to read it): remount it read-write, or work in a writable copy")
    if (vfs is not None and vfs.f_bavail == 0) or "full" in text:
        return f"{path}: no space left on the device ({text}): free some space, then run it again"
    return disk_error_line(exc) if isinstance(exc, OSError) else None


def busy(path: Path, waited: float) -> StateBusy:
    holder = lock_holder(path)
    who = f" (held by {holder})" if holder else ""
    return StateBusy(f"{path} is locked by another process{who} for more than {waited:g} s: wait for it to "
                     "finish, or stop it, then run this again")


def lock_holder(path: Path) -> str | None:
    """"pid N (command)" of a process holding a lock on the store or its WAL index, from /proc/locks."""
    inodes = set()
    for suffix in ("", "-shm", "-wal"):
        try:
            inodes.add(os.stat(f"{path}{suffix}").st_ino)
        except OSError:
            pass
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":
            continue
        try:
            pid, ino = int(parts[4]), int(parts[5].rsplit(":", 1)[-1])
        except ValueError:
            continue
        if ino in inodes and pid != os.getpid():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmd = ""
            cmd = "".join(c if c.isprintable() else " " for c in " ".join(cmd.split()))[:80]
            return f"pid {pid}" + (f": {cmd}" if cmd else "")
    return None


def unusable(path: Path, exc: sqlite3.Error) -> Exception:
    """What a reader raises for an sqlite error in the middle of reading: a held lock names its
    holder, a full or read-only disk stays itself (said as such), anything else is damage."""
    if isinstance(exc, (StateDamaged, StateBusy, StateDisk)):
        return exc
    text = str(exc)
    if "locked" in text or "busy" in text:
        return busy(path, READ_WAIT_S)
    fault = disk_fault(path, exc)
    if fault:
        return StateDisk(fault)
    return StateDamaged(f"{path}: not a usable state database ({exc}): {REPAIR}")
