"""The watcher's own store, `state_dir()/email.db` (SQLite, WAL; the watcher is its one writer):
the outbox of mails to send, the Message-IDs already acted on, and the repositories an emailed
`pause` stopped.

Per user, like the settings and the mailbox: one watcher serves every registered repository, and
an answer to a mail that names no repository (an unknown code, `status`) has to queue somewhere too.
A mail that fails to send stays queued and is tried again later, each wait twice the last
(BACKOFF_S up to BACKOFF_MAX_S), so an outage loses nothing and blocks nothing.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from pilothouse.core.state.events import utc_now_iso
from pilothouse.providers import paths
from pilothouse.providers.fsutil import use_wal

BACKOFF_S = 5.0
BACKOFF_MAX_S = 900.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  repo TEXT,                      -- the problem's repository (NULL for an answer to a mail)
  code TEXT,                      -- the problem's code (NULL for an answer to a mail)
  message BLOB NOT NULL,          -- the whole mail, already redacted
  state TEXT NOT NULL,            -- queued|sent|dropped
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at REAL NOT NULL,          -- unix time of the next try
  last_error TEXT,
  created_at TEXT NOT NULL,
  done_at TEXT,
  UNIQUE (repo, code)
);
CREATE TABLE IF NOT EXISTS seen (
  message_id TEXT PRIMARY KEY,
  at TEXT NOT NULL,
  outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS paused (
  repo TEXT PRIMARY KEY,
  at TEXT NOT NULL
);
"""


def db_path() -> Path:
    return paths.state_dir() / "email.db"


def connect(path: Path | None = None) -> sqlite3.Connection:
    path = path or db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    use_wal(conn)
    conn.execute("PRAGMA busy_timeout=10000")
    conn.executescript(SCHEMA)
    return conn


@dataclass(frozen=True)
class Queued:
    id: int
    repo: str | None
    code: str | None
    message: bytes
    attempts: int


def queue(conn: sqlite3.Connection, message: bytes, repo: str | None = None, code: str | None = None) -> bool:
    """Queue a mail; False when this problem's mail was queued before (one mail per problem)."""
    cur = conn.execute("INSERT OR IGNORE INTO outbox(repo, code, message, state, next_at, created_at)"
                       " VALUES (?, ?, ?, 'queued', ?, ?)", (repo, code, message, time.time(), utc_now_iso()))
    return cur.rowcount == 1


def queue_held(conn: sqlite3.Connection, message: bytes, hold_s: float) -> Queued:
    """Queue an answer that its sender tries at once; not due for anyone else for `hold_s`."""
    cur = conn.execute("INSERT INTO outbox(message, state, next_at, created_at) VALUES (?, 'queued', ?, ?)",
                       (message, time.time() + hold_s, utc_now_iso()))
    return Queued(int(cur.lastrowid or 0), None, None, message, 0)


def mailed(conn: sqlite3.Connection, repo: str) -> set[str]:
    """Codes of this repository's problems that already have a mail (sent, queued or dropped)."""
    return {r["code"] for r in conn.execute("SELECT code FROM outbox WHERE repo = ?", (repo,))}


def due(conn: sqlite3.Connection, now: float | None = None) -> list[Queued]:
    now = time.time() if now is None else now
    return [Queued(r["id"], r["repo"], r["code"], bytes(r["message"]), r["attempts"]) for r in conn.execute(
        "SELECT * FROM outbox WHERE state = 'queued' AND next_at <= ? ORDER BY id", (now,))]


def next_due(conn: sqlite3.Connection) -> float | None:
    row = conn.execute("SELECT min(next_at) AS t FROM outbox WHERE state = 'queued'").fetchone()
    return row["t"] if row and row["t"] is not None else None


def finish(conn: sqlite3.Connection, item: Queued, state: str, why: str | None = None) -> None:
    conn.execute("UPDATE outbox SET state = ?, done_at = ?, last_error = ? WHERE id = ?",
                 (state, utc_now_iso(), why, item.id))


def failed(conn: sqlite3.Connection, item: Queued, error: str, now: float | None = None) -> float:
    """Record a failed try; returns the seconds until the next one."""
    wait = min(BACKOFF_S * 2 ** item.attempts, BACKOFF_MAX_S)
    conn.execute("UPDATE outbox SET attempts = attempts + 1, next_at = ?, last_error = ? WHERE id = ?",
                 ((time.time() if now is None else now) + wait, error[:500], item.id))
    return wait


def first_time(conn: sqlite3.Connection, message_id: str) -> bool:
    """True when this Message-ID was not acted on before; it is recorded either way."""
    cur = conn.execute("INSERT OR IGNORE INTO seen(message_id, at, outcome) VALUES (?, ?, 'taken')",
                       (message_id, utc_now_iso()))
    return cur.rowcount == 1


def record_outcome(conn: sqlite3.Connection, message_id: str, outcome: str) -> None:
    conn.execute("UPDATE seen SET outcome = ? WHERE message_id = ?", (outcome[:500], message_id))


def mark_paused(conn: sqlite3.Connection, repo: str) -> None:
    conn.execute("INSERT OR REPLACE INTO paused(repo, at) VALUES (?, ?)", (repo, utc_now_iso()))


def take_paused(conn: sqlite3.Connection) -> list[str]:
    rows = [r["repo"] for r in conn.execute("SELECT repo FROM paused ORDER BY at")]
    conn.execute("DELETE FROM paused")
    return rows
