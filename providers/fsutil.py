"""Small file helpers: atomic writes, private directories, and reading a worker-written tree
without following its links (read_in_tree)."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


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


@dataclass(frozen=True)
class TreeEntry:
    """What host-side code may take of one path in a tree a worker wrote (read_in_tree)."""

    kind: Literal["file", "link", "missing", "other"]
    data: bytes = b""        # file: its first `limit` bytes; link: the link's own target text
    truncated: bool = False  # file: it holds more than `limit` bytes
    at: str = ""             # link/other: the path (relative to the root) that is one
    size: int = 0            # file: its whole size

    def text(self) -> str:
        """The file's text (undecodable bytes replaced), or how a link or special file is shown."""
        if self.kind == "link":
            return f"{self.at} -> {os.fsdecode(self.data)} (a symbolic link, not followed)"
        if self.kind == "other":
            return f"{self.at}: not a regular file"
        return self.data.decode("utf-8", errors="replace")


def read_in_tree(root: Path | str, rel: Path | str, limit: int) -> TreeEntry:
    """Read `rel` under `root` without following any symlink, at most `limit` bytes.

    For trees a worker wrote (worktrees, the integration checkout): every component is opened
    relative to its parent with O_NOFOLLOW, so a link anywhere on the way (`README.md ->
    ~/.ssh/id_rsa`, `docs -> /`) is reported as a link with its target text and never resolved,
    an absolute or `..` path is refused, and a FIFO or device is not opened for reading (it could
    block or never end). The stdlib has no openat2(RESOLVE_BENEATH) and no library we ship wraps
    it portably; the walk below is that, one component at a time.
    """
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in ("..", ".") for p in parts):
        raise ValueError(f"{rel!r} is not a plain relative path inside the tree")
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root itself is ours
    except FileNotFoundError:
        return TreeEntry("missing")
    try:
        for i, name in enumerate(parts):
            here = "/".join(parts[:i + 1])
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return TreeEntry("missing")
            if stat.S_ISLNK(st.st_mode):
                return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
            last = i == len(parts) - 1
            if not last:
                if not stat.S_ISDIR(st.st_mode):
                    return TreeEntry("missing")
                try:
                    nxt = os.open(name, dir_flags, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since the lstat
                        return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
                    raise
                os.close(fd)
                fd = nxt
                continue
            if not stat.S_ISREG(st.st_mode):
                return TreeEntry("other", at=here)
            # O_NONBLOCK: swapped for a FIFO since the lstat, the open must not hang; O_NOFOLLOW:
            # swapped for a link, it fails (ELOOP) instead of reading the target
            try:
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
                raise
            with os.fdopen(ffd, "rb") as fh:
                fst = os.fstat(ffd)
                if not stat.S_ISREG(fst.st_mode):
                    return TreeEntry("other", at=here)
                data = fh.read(limit + 1)
            return TreeEntry("file", data[:limit], truncated=len(data) > limit, size=fst.st_size)
        return TreeEntry("missing")
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


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
