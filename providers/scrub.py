"""No raw key at rest in a run folder: when a run ends, every file in its sandbox is redacted.

A worker must read its credential to call its model, and whatever it then does with it lands in
its own files: the builtin worker's conversation.json (a tool result that printed the key),
Codex's rollout and sqlite state, Claude Code's session files, OpenCode's storage. The dispatch
that ran it scrubs the whole run folder (providers_dir()/<key>/runs/<id>) once the worker is gone:
text files get REDACTED in place of every form of every key; binary files (a SQLite database)
get a mask of the same length, so their structure (a record's length, a page) stays valid and the
agent can still read its session on a resume. A SQLite write-ahead log is checkpointed into its
database first: its frames carry checksums, and a masked frame would silently drop the session's
last transactions (OpenCode keeps its whole session in one).

The files are the worker's: symlinks are never followed, only regular files are read, and the
redacted copy replaces the file by rename (a hard link to a file elsewhere is replaced, never
written through). A file that cannot be rewritten is removed.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from pilothouse.providers.fsutil import atomic_write_bytes
from pilothouse.providers.redact import REDACTED, Redactor

MAX_FILE_BYTES = 256 * 1024 * 1024


def _pattern(redactor: Redactor) -> re.Pattern[bytes] | None:
    forms = sorted({f.encode("utf-8") for f in redactor.forms}, key=lambda b: (-len(b), b))
    return re.compile(b"|".join(re.escape(f) for f in forms)) if forms else None


def scrub_bytes(data: bytes, pattern: re.Pattern[bytes]) -> bytes:
    """`data` with every form replaced: by REDACTED in text, by a mask of equal length in binary."""
    if b"\0" in data[:8192]:
        return pattern.sub(lambda m: b"*" * len(m.group(0)), data)
    return pattern.sub(REDACTED.encode(), data)


def scrub_tree(root: Path, redactor: Redactor, *, skip: frozenset[str] = frozenset()) -> list[str]:
    """Redact every regular file under `root` (names in `skip` aside); returns the paths (relative
    to root) that held a key. Never follows a symlink."""
    pattern = _pattern(redactor)
    if pattern is None or not root.is_dir() or root.is_symlink():
        return []
    changed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            if name.endswith("-wal") and name[:-4] in filenames:
                _checkpoint(Path(dirpath) / name[:-4])
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            if name in skip:
                continue
            path = Path(dirpath) / name
            if _scrub_file(path, pattern):
                changed.append(str(path.relative_to(root)))
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return changed


def _scrub_file(path: Path, pattern: re.Pattern[bytes]) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return False
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
    finally:
        os.close(fd)
    if pattern.search(data) is None:
        return False
    try:
        atomic_write_bytes(path, scrub_bytes(data, pattern), stat.S_IMODE(st.st_mode) | 0o600, durable=False)
    except OSError:
        try:
            os.chmod(path.parent, 0o700)  # a worker may have made its own folder read-only
            atomic_write_bytes(path, scrub_bytes(data, pattern), stat.S_IMODE(st.st_mode) | 0o600, durable=False)
        except OSError:
            path.unlink(missing_ok=True)
    return True


def _checkpoint(db: Path) -> None:
    """Fold a SQLite WAL into its database (and empty it), so the key sits in plain pages only.

    The worker is gone; its database is still its own writing, so it is opened without running
    anything its schema asks for (trusted_schema off) and only when both files are regular."""
    import sqlite3
    from urllib.parse import quote

    for p in (db, db.with_name(db.name + "-wal")):
        try:
            if not stat.S_ISREG(os.lstat(p).st_mode):
                return
        except OSError:
            return
    try:
        conn = sqlite3.connect(f"file:{quote(str(db))}?mode=rw", uri=True, timeout=2, isolation_level=None)
    except sqlite3.Error:
        return
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass  # not a database after all, or locked: the file is masked like any other
    finally:
        conn.close()


def scrub_run(provider: str, run_id: str, redactor: Redactor) -> list[str]:
    """scrub_tree on a run's folder, for a run whose dispatch died before it could (the supervisor
    calls it). A resumed run's id is a link to the original's folder, followed only when the
    target is a sibling in the same runs directory."""
    from pilothouse.providers import sandbox

    if not sandbox.valid_run_id(run_id) or not sandbox.valid_run_id(provider):
        return []
    base = sandbox.runs_dir(provider)
    root = base / run_id
    if root.is_symlink():
        root = root.resolve()
        if root.parent != base.resolve():
            return []
    return scrub_tree(root, redactor, skip=frozenset({sandbox.CREDENTIAL, sandbox.LOCK}))
