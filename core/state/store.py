"""Runtime state in `.ai/runtime/state.db` (SQLite, WAL).

One writer per table: the supervisor writes jobs_state, tasks, runs, problems, quota_windows
and supervisor; operators (CLI, cockpit) write only `replies`, which the supervisor consumes.
Every state change is one transaction, paired with one events.jsonl line by the caller.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from pilothouse.providers.errors import UserError
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


class StateDamaged(UserError, sqlite3.DatabaseError):
    """state.db cannot be used: missing where history says it existed, not a database, damaged, or
    from another version. A UserError (one line with what to run) and an sqlite3 error (so every
    view that already tolerates a store it cannot read goes on tolerating it)."""


REPAIR = "`pilothouse maintain repair` rebuilds it from .ai/ and events.jsonl"


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    """Open state.db in WAL mode (creating the schema unless readonly). A file that is not a
    pilothouse store of this version raises StateDamaged."""
    path = Path(path)
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10, isolation_level=None)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=10, isolation_level=None)
            use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=10000")
        _check_version(conn, path, readonly)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, StateDamaged) or "locked" in str(exc) or "busy" in str(exc):
            raise
        if readonly and "unable to open" in str(exc):
            raise  # no store yet: each reader says what that means for it
        raise StateDamaged(f"{path}: not a usable state database ({exc}): {REPAIR}") from None
    return conn


def require_usable(db: Path, events: Path) -> None:
    """Raise StateDamaged when a supervisor could not work with `db`: unreadable, from another
    version, or missing although `events` shows a supervisor ran here (a fresh store would forget
    every job, task and open problem)."""
    from pilothouse.core.state.events import EventTailer

    if db.exists():
        connect(db, readonly=True).close()
        return
    if any(ev["type"] == "supervisor.started" for ev in EventTailer(events).iter_new()):
        raise StateDamaged(f"{db} is missing but {events} shows a supervisor ran here: {REPAIR}")


def _check_version(conn: sqlite3.Connection, path: Path, readonly: bool) -> None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    except sqlite3.OperationalError as exc:
        if readonly and "no such table" in str(exc) and path.stat().st_size == 0:
            return  # being created by a supervisor this very moment
        raise
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
