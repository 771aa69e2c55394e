"""Runtime state in `.ai/runtime/state.db` (SQLite, WAL).

One writer per table: the supervisor writes jobs_state, tasks, runs, problems, quota_windows
and supervisor; operators (CLI, cockpit) write only `replies`, which the supervisor consumes.
Every state change is one transaction, paired with one events.jsonl line by the caller.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from pilothouse.core.state.store_faults import (  # noqa: F401  (every reader imports them from here)
    READ_WAIT_S,
    REPAIR,
    WRITE_WAIT_S,
    StateBusy,
    StateDamaged,
    StateDisk,
    busy,
    disk_fault,
    lock_holder,
    unusable,
)
from pilothouse.providers.fsutil import use_wal

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs_state (
  job TEXT PRIMARY KEY,
  state TEXT NOT NULL,              -- created|planning|running|waiting|blocked|accepted|failed|stopped
  revision INTEGER NOT NULL DEFAULT 1,
  planned_revision INTEGER NOT NULL DEFAULT 0,
  coordinator TEXT,                 -- pinned provider/model once chosen
  tokens INTEGER NOT NULL DEFAULT 0,
  reason TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  finished_at TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
  job TEXT NOT NULL,
  task TEXT NOT NULL,
  state TEXT NOT NULL,              -- docs/contracts.md "Task states"
  kind TEXT NOT NULL,
  depends_on TEXT NOT NULL DEFAULT '[]',   -- JSON list
  attempt INTEGER NOT NULL DEFAULT 0,
  review_round INTEGER NOT NULL DEFAULT 0,
  provider TEXT,
  model TEXT,
  run_id TEXT,                      -- current or last run
  session_id TEXT,                  -- builder session, resumed for findings/hints
  branch TEXT,
  worktree TEXT,
  commit_sha TEXT,                  -- builder's last commit
  merged_sha TEXT,
  activity TEXT,                    -- what the worker is doing now (tool)
  tokens INTEGER NOT NULL DEFAULT 0,
  reason TEXT,                      -- why it is in this state
  counters TEXT NOT NULL DEFAULT '{}',   -- JSON: retries used per kind (gate_fail, crash, plan, …)
  started_at TEXT,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (job, task)
);
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  job TEXT,
  task TEXT,
  role TEXT NOT NULL,               -- builder|reviewer|assigner|tester
  provider TEXT NOT NULL,
  model TEXT,
  mode TEXT NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0,
  pid INTEGER,
  pid_start TEXT,                   -- /proc start time, so a reused pid is not mistaken for ours
  state TEXT NOT NULL,              -- running|finished|adopted|lost
  verdict TEXT,                     -- JSON of the verdict line
  tokens INTEGER NOT NULL DEFAULT 0,
  cost_usd REAL NOT NULL DEFAULT 0,
  log TEXT,
  started_at TEXT NOT NULL,
  finished_at TEXT
);
-- a job's and a task's runs (usage labels, status): without it every task row scans every run
CREATE INDEX IF NOT EXISTS runs_by_task ON runs (job, task);
CREATE TABLE IF NOT EXISTS problems (
  code TEXT PRIMARY KEY,            -- six letters, no look-alikes
  job TEXT NOT NULL,
  task TEXT,
  kind TEXT NOT NULL,
  summary TEXT NOT NULL,
  evidence TEXT NOT NULL DEFAULT '{}',   -- JSON: log path, gate output tail, …
  replies TEXT NOT NULL,            -- JSON list of allowed replies
  state TEXT NOT NULL,              -- open|answered|closed
  opened_at TEXT NOT NULL,
  answer TEXT,
  answered_at TEXT,
  closed_at TEXT
);
CREATE TABLE IF NOT EXISTS replies (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  code TEXT NOT NULL,
  reply TEXT NOT NULL,
  words TEXT,
  who TEXT NOT NULL,
  at TEXT NOT NULL,
  consumed_at TEXT
);
CREATE TABLE IF NOT EXISTS quota_windows (
  provider TEXT NOT NULL,
  window TEXT NOT NULL,             -- five_hour|weekly|<as reported>
  used_pct REAL,
  resets_at TEXT,
  blocked INTEGER NOT NULL DEFAULT 0,
  observed_at TEXT NOT NULL,
  source TEXT NOT NULL,             -- http-429|rate_limit_event|check|…
  next_check_at TEXT,
  backoff_s INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (provider, window)
);
CREATE TABLE IF NOT EXISTS supervisor (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  pid INTEGER NOT NULL,
  pid_start TEXT,
  started_at TEXT NOT NULL,
  heartbeat_at TEXT NOT NULL,
  stopped_at TEXT
);
"""


# "PHST" in the file's header (PRAGMA application_id): what tells this store from any other SQLite file
APPLICATION_ID = 0x50485354
TABLES = ("meta", "jobs_state", "tasks", "runs", "problems", "replies", "quota_windows", "supervisor")


def connect(path: Path, readonly: bool = False, *, rebuild: bool = False) -> sqlite3.Connection:
    """Open state.db in WAL mode (creating the schema unless readonly). A file that is not a
    pilothouse store of this version raises StateDamaged; a lock held past the wait, StateBusy.
    A new store is made only where the event log shows none existed, or by `maintain repair`
    (`rebuild`): anything else would start from nothing where there was work."""
    path = Path(path)
    _check_file(path)
    if not readonly and not rebuild and not path.exists():
        _refuse_if_lost(path, "missing")
    wait = READ_WAIT_S if readonly else WRITE_WAIT_S
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=wait, isolation_level=None)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=wait, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        try:
            fresh = _check_identity(conn, path, rebuild)
            if not readonly:
                use_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
                _stamp(conn, path, fresh)
        except BaseException:
            conn.close()
            raise
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, (StateDamaged, StateBusy, StateDisk)):
            raise
        if "locked" in str(exc) or "busy" in str(exc):
            raise busy(path, wait) from None
        if readonly and "unable to open" in str(exc) and not path.exists():
            raise  # no store yet: each reader says what that means for it
        fault = disk_fault(path, exc)
        if fault:
            raise StateDisk(fault) from None
        raise StateDamaged(f"{path}: not a usable state database ({exc}): {REPAIR}") from None
    return conn


def _check_file(path: Path) -> None:
    """Refuse what SQLite would hang on or misread: a FIFO, a device, a directory, an unreadable file."""
    import stat

    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise StateDamaged(f"{path} is a link to nothing: {REPAIR}") from None
        return
    except OSError as exc:
        raise StateDamaged(f"{path} cannot be examined ({exc.strerror}): check its folder's permissions") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise StateDamaged(f"{path} is {kind}, not a database file: {REPAIR} (keeping this aside)")
    if not os.access(path, os.R_OK):
        raise StateDamaged(f"{path} cannot be read (permission denied): give it back its owner's read and "
                           f"write permission (chmod u+rw {path})")


def _refuse_if_lost(path: Path, what: str) -> None:
    witness = history(path)
    if witness:
        raise StateDamaged(f"{path} is {what} but {witness}: {REPAIR}")


def _check_identity(conn: sqlite3.Connection, path: Path, rebuild: bool) -> bool:
    """Raise StateDamaged unless `conn` is this repository's pilothouse store of this version, or a
    new, empty file (then True: its schema is still to be made)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables and app_id == 0:
        if not rebuild:  # emptied (truncated, or all its tables dropped): lost, unless nothing ran here
            _refuse_if_lost(path, "empty")
        return True
    if app_id not in (0, APPLICATION_ID):
        raise StateDamaged(f"{path} belongs to another program (SQLite application id {app_id:#010x}), not "
                           f"pilothouse: {REPAIR} (keeping this file aside)")
    if app_id == 0 and "meta" not in tables:
        names = ", ".join(sorted(tables)[:4]) + (", …" if len(tables) > 4 else "")
        raise StateDamaged(f"{path} is another program's SQLite database (tables: {names}), not a pilothouse "
                           f"store: {REPAIR} (keeping this file aside)")
    if version not in (0, SCHEMA_VERSION):
        raise StateDamaged(f"{path}: made by another pilothouse version (store schema {version}, this one "
                           f"reads {SCHEMA_VERSION}): {REPAIR}, or run the version that made it")
    _check_version(conn, path)
    lost = [t for t in TABLES if t not in tables]
    if lost:
        raise StateDamaged(f"{path} has lost its table(s) {', '.join(lost)}: {REPAIR}")
    _check_repo(conn, path)
    return False


def _stamp(conn: sqlite3.Connection, path: Path, fresh: bool) -> None:
    """Make the schema of a new store, and give it (or one made before stores had one) its identity."""
    root = repo_of(path)
    if not fresh:
        have = {r[0]: r[1] for r in conn.execute("SELECT key, value FROM meta WHERE key IN ('schema', 'repo')")}
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        if (have.get("schema") is not None and (root is None or have.get("repo") == str(root))
                and "runs_by_task" in indexes and conn.execute("PRAGMA application_id").fetchone()[0]
                == APPLICATION_ID and conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION):
            return  # it has its identity: opening it writes nothing (no write lock for a mere answer)
    if fresh:
        conn.executescript(SCHEMA)
    else:
        # columns and indexes added since (CREATE … IF NOT EXISTS): a table that is gone stays gone,
        # _check_identity refused it
        conn.executescript("\n".join(s for s in SCHEMA.split(";\n") if "CREATE INDEX" in s) + ";")
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    if root is not None:
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('repo', ?)", (str(root),))
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def repo_of(path: Path) -> Path | None:
    """The repository a state.db at `path` serves (…/REPO/.ai/runtime/state.db), or None elsewhere."""
    path = Path(os.path.abspath(path))
    if path.parent.name == "runtime" and path.parent.parent.name == ".ai":
        return path.parent.parent.parent
    return None


def _check_repo(conn: sqlite3.Connection, path: Path) -> None:
    """A store copied from another repository that still has its own is that one's, not this one's;
    a repository that was moved keeps its store (the next writer records the new place)."""
    row = conn.execute("SELECT value FROM meta WHERE key='repo'").fetchone()
    here = repo_of(path)
    if row is None or here is None or row[0] == str(here):
        return
    theirs = Path(row[0]) / ".ai" / "runtime" / "state.db"
    try:
        copied = theirs.is_file() and not theirs.samefile(path)
    except OSError:
        copied = False
    if copied:
        raise StateDamaged(f"{path} is the store of {row[0]} (copied here?), not of {here}: "
                           f"{REPAIR} (keeping this file aside)")


# (events.jsonl, its inode) -> its first line and how far it has been read without a supervisor.started:
# the cockpit asks on every footer it draws while a repository has no store yet, and a long log of
# one-off dispatches must not be read again each time (the log is append-only; a new file under the
# name, even one given the old inode, has another first line and starts over)
_NO_WITNESS_UP_TO: dict[tuple[str, int], tuple[bytes, int]] = {}
_WITNESS = b"supervisor.started"


def history(path: Path) -> str | None:
    """What in the event log beside `path` shows a store existed here ("events.jsonl shows a
    supervisor ran here"), or None when nothing does."""
    import mmap

    from pilothouse.core.state.events import decode_event, open_log

    events = Path(path).with_name("events.jsonl")
    try:
        fh = open_log(events)  # a FIFO or a directory there is no log, and no witness: OSError
        if fh is None:
            return None
        with fh:
            st = os.fstat(fh.fileno())
            key = (str(events), st.st_ino)
            head = fh.readline(256)
            seen, start = _NO_WITNESS_UP_TO.get(key, (head, 0))
            if seen != head:
                start = 0
            if st.st_size <= start:
                return None
            # the bytes are searched, not every line decoded: a million-line log is a tenth of a second;
            # each line the name is found in is decoded, so text that merely mentions it is no witness
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                size = len(mm)
                at = mm.find(_WITNESS, start)
                while at != -1:
                    begin = mm.rfind(b"\n", 0, at) + 1
                    end = mm.find(b"\n", at)
                    if end == -1:  # a line still being written: read again next time
                        size = begin
                        break
                    ev, _ = decode_event(mm[begin:end])
                    if ev is not None and ev["type"] == "supervisor.started":
                        return f"{events} shows a supervisor ran here"
                    at = mm.find(_WITNESS, end)
                else:
                    size = mm.rfind(b"\n", 0, size) + 1  # up to the last whole line
            _NO_WITNESS_UP_TO[key] = head, size
    except (OSError, ValueError):  # no log, not a file, or one emptied meanwhile (mmap of nothing)
        return None
    return None


def open_reader(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to the store, or None when there truly is none yet (no file, and
    nothing in the event log says there was one). Never None for a store that was lost or damaged."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        _refuse_if_lost(path, "missing")
        return None
    conn = connect(path, readonly=True)
    if not {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}:
        conn.close()
        return None  # a new file its supervisor is making right now (`connect` checked the log)
    return conn


def require_usable(db: Path, events: Path) -> None:
    """Raise StateDamaged when a supervisor could not work with `db`: unreadable, from another
    version, or missing although `events` shows a supervisor ran here (a fresh store would forget
    every job, task and open problem)."""
    conn = open_reader(db)
    if conn is not None:
        conn.close()


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        return
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        version = -1
    if version != SCHEMA_VERSION:
        raise StateDamaged(f"{path}: made by another pilothouse version (store schema {row[0]!r}, this one "
                           f"reads {SCHEMA_VERSION}): {REPAIR}, or run the version that made it")


def loads(value: str | None, default: Any) -> Any:
    """A JSON column's value; `default` when empty or unreadable (a view never fails on one row)."""
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError:
        return default
