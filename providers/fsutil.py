"""Small file helpers for the host's own files: atomic writes, private directories, locks.
(A tree a worker can write is touched only through providers/workerfs.py.)"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def lock_held(path: Path) -> bool:
    """Whether another process holds an exclusive flock on `path` (a process's "I am running" lock);
    False when the file does not exist. Only looks: a lock it could take is let go at once."""
    import fcntl

    if not path.exists():
        return False
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return False


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def atomic_write_text(path: Path, text: str, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write via a temp file in the same directory and rename, so readers never see half a file.

    durable=False skips the fsync: the file still survives its writer being killed (the page cache
    is the kernel's), just not a power cut — for files whose companions are not synced either."""
    atomic_write_bytes(path, text.encode("utf-8"), mode, durable=durable)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """atomic_write_text for bytes. The rename replaces a hard link rather than writing through it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk fails the write, not the open
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def atomic_write_json(path: Path, data: Any, mode: int = 0o644, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n", mode, durable=durable)


def use_wal(conn: Any, tries: int = 100) -> None:
    """Put a SQLite database in WAL mode. Connections that switch a new file at the same moment
    collide, and SQLite gives the loser `database is locked` at once, without the connection's busy
    wait (it would deadlock otherwise). The switch is asked again until it holds: the winner's
    persists in the file, so the next ask is immediate."""
    import sqlite3
    import time

    for attempt in range(tries):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.01 * (1 + attempt % 10))
