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
written through). What the worker closed against its owner (a read-only or mode-000 folder, the
run folder itself included, a mode-000 file) is opened to the owner again first: the run folder is
the operator's, and a key must not stay at rest because a worker ran chmod. A file that cannot be
rewritten is removed, and so is one holding a key that is too big to rewrite in memory (over
MAX_FILE_BYTES; it is searched to its end, a chunk at a time).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pilothouse.providers import workerfs
from pilothouse.providers.redact import REDACTED, Redactor

MAX_FILE_BYTES = 256 * 1024 * 1024
_T = TypeVar("_T")


def _pattern(redactor: Redactor) -> re.Pattern[bytes] | None:
    forms = sorted({f.encode("utf-8") for f in redactor.forms}, key=lambda b: (-len(b), b))
    return re.compile(b"|".join(re.escape(f) for f in forms)) if forms else None


def scrub_bytes(data: bytes, pattern: re.Pattern[bytes]) -> bytes:
    """`data` with every form replaced: by REDACTED in text, by a mask of equal length in binary."""
    if b"\0" in data[:8192]:
        return pattern.sub(lambda m: b"*" * len(m.group(0)), data)
    return pattern.sub(REDACTED.encode(), data)


def scrub_tree(root: Path, redactor: Redactor, *, skip: frozenset[str] = frozenset(),
               on_skip: Callable[[workerfs.Skipped], None] | None = None) -> list[str]:
    """Redact every regular file under `root` (names in `skip` aside); returns the paths (relative
    to root) that held a key. Walks, reads and rewrites through the door (providers/workerfs.py):
    no link followed, no FIFO opened; what was passed over goes to `on_skip`."""
    pattern = _pattern(redactor)
    if pattern is None or not root.is_dir() or root.is_symlink():
        return []
    span = max(len(form.encode("utf-8")) for form in redactor.forms)  # the longest a match can be
    # every regular file, the big ones too: _scrub_file searches those to their end
    files = list(workerfs.walk(root, skip_names=skip, on_skip=on_skip, limit=1 << 62, reopen=True))
    names = {f.rel for f in files}
    for f in files:
        if f.rel.endswith("-wal") and f.rel[:-4] in names:
            _checkpoint(root, f.rel[:-4])
    changed: list[str] = []
    for f in files:
        if _scrub_file(root, f, pattern, span):
            changed.append(f.rel)
    return changed


def _scrub_file(root: Path, f: workerfs.FileAt, pattern: re.Pattern[bytes], span: int) -> bool:
    try:
        entry = _owned(root, f.rel, lambda: workerfs.read(root, f.rel, MAX_FILE_BYTES, find=pattern, span=span),
                       itself=True)
    except OSError:
        return False
    if entry.kind != "file":
        return False
    if entry.truncated:
        # too big to rewrite in memory: one that holds a key goes (a key left at rest is the one
        # thing this must not do); one that holds none stays as it is
        if pattern.search(entry.data) is None and not entry.found_past:
            return False
        try:
            _owned(root, f.rel, lambda: workerfs.remove(root, f.rel))
        except OSError:
            pass
        return True
    if pattern.search(entry.data) is None:
        return False
    data = scrub_bytes(entry.data, pattern)
    mode = stat.S_IMODE(f.mode) | 0o600
    try:
        _owned(root, f.rel, lambda: workerfs.write(root, f.rel, data, mode))
    except OSError:
        try:
            _owned(root, f.rel, lambda: workerfs.remove(root, f.rel))
        except OSError:
            pass
    return True


def _owned(root: Path, rel: str, act: Callable[[], _T], *, itself: bool = False) -> _T:
    """`act()`, and once more after taking back what a worker may have locked against its owner:
    the folder holding `rel` (the run folder itself for a file at its top) made read-only, and with
    `itself` the file made unreadable (mode 000). Both are the operator's to undo: the run folder
    and everything in it belong to the operator's uid (a worker runs as it)."""
    try:
        return act()
    except OSError:
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        workerfs.chmod(root, parent, 0o700)
        if itself:
            workerfs.chmod(root, rel, 0o600)
        return act()


def _checkpoint(root: Path, rel: str) -> None:
    """Fold a SQLite WAL into its database (and empty it), so the key sits in plain pages only.

    The worker is gone (or, after a dispatch died, may still hold the database); its database is
    still its own writing, so it is opened without running anything its schema asks for
    (trusted_schema off). SQLite opens by path and writes in place, so it is given a folder of the
    host's holding second links to the database, its WAL and its -shm (workerfs.linked_aside): no
    name on that path is the worker's to swap for a link, and nothing is checkpointed when one of
    them is a link, not a regular file, or a file with a hard link elsewhere (the operator's)."""
    import sqlite3
    from urllib.parse import quote

    parent, _, name = rel.rpartition("/")
    try:
        with workerfs.linked_aside(root, parent, (name, name + "-wal"), (name + "-shm",)) as aside:
            if aside is None:
                return
            conn = sqlite3.connect(f"file:{quote(str(aside / name))}?mode=rw", uri=True, timeout=2,
                                   isolation_level=None)
            try:
                conn.execute("PRAGMA trusted_schema=OFF")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # not a database after all, or locked: the file is masked like any other
            finally:
                conn.close()
    except (OSError, sqlite3.Error):
        return


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
