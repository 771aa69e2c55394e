"""Read-only queries for what holds work up: open problems and their replies, the providers'
quota windows, the supervisor's row. Also the read-only connection every query shares.

core/queries.py builds the cockpit's full `Queries` on `ProblemQueries` and adds the jobs,
tasks and runs; both halves read through one lazily opened connection (`StoreReader`). The
store may not exist yet (a repository with no job): every query then answers empty, and the
connection is opened as soon as the file appears.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pilothouse.core.layout import RepoLayout
from pilothouse.core.store import connect


def loads(value: str | None, default: Any) -> Any:
    """A JSON column's value; `default` when empty or unreadable (a view never fails on one row)."""
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError:
        return default


@dataclass(frozen=True)
class ProblemRow:
    code: str
    job: str
    task: str | None
    kind: str
    summary: str
    evidence: dict[str, Any]
    replies: tuple[str, ...]
    state: str
    opened_at: str
    answer: str | None
    answered_at: str | None


@dataclass(frozen=True)
class ReplyRow:
    id: int
    code: str
    reply: str
    words: str | None
    who: str
    at: str
    consumed_at: str | None


@dataclass(frozen=True)
class QuotaWindow:
    provider: str
    window: str
    used_pct: float | None
    resets_at: str | None
    blocked: bool
    observed_at: str
    source: str
    next_check_at: str | None
    backoff_s: int


@dataclass(frozen=True)
class ProviderRow:
    provider: str
    windows: tuple[QuotaWindow, ...] = ()

    def available(self, now: datetime) -> bool:
        """No window blocks use right now (a passed reset time only permits a check)."""
        return not any(w.blocked for w in self.windows)

    @property
    def next_check_at(self) -> str | None:
        checks = [w.next_check_at for w in self.windows if w.next_check_at]
        return min(checks) if checks else None


@dataclass(frozen=True)
class SupervisorRow:
    pid: int
    started_at: str
    heartbeat_at: str
    stopped_at: str | None


class StoreReader:
    """One read-only connection to a repository's state.db, opened lazily."""

    def __init__(self, layout: RepoLayout) -> None:
        self.layout = layout
        self._conn: sqlite3.Connection | None = None

    @property
    def conn(self) -> sqlite3.Connection | None:
        if self._conn is None and self.layout.state_db.exists():
            try:
                self._conn = connect(self.layout.state_db, readonly=True)
            except sqlite3.Error:
                return None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        conn = self.conn
        if conn is None:
            return []
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            # a store older than the schema, or one being created right now: show nothing yet
            return []


class ProblemQueries(StoreReader):
    """Problems, replies, providers and the supervisor."""

    # --- problems -----------------------------------------------------------------------------

    @staticmethod
    def _problem(r: sqlite3.Row) -> ProblemRow:
        replies = loads(r["replies"], [])
        evidence = loads(r["evidence"], {})
        return ProblemRow(code=r["code"], job=r["job"], task=r["task"], kind=r["kind"],
                          summary=r["summary"], evidence=evidence if isinstance(evidence, dict) else {},
                          replies=tuple(str(x) for x in replies) if isinstance(replies, list) else (),
                          state=r["state"], opened_at=r["opened_at"], answer=r["answer"],
                          answered_at=r["answered_at"])

    def problems(self, open_only: bool = True) -> list[ProblemRow]:
        where = " WHERE state = 'open'" if open_only else ""
        return [self._problem(r) for r in self._all(
            f"SELECT * FROM problems{where} ORDER BY opened_at, code")]

    def problem(self, code: str) -> ProblemRow | None:
        rows = self._all("SELECT * FROM problems WHERE code = ?", (code,))
        return self._problem(rows[0]) if rows else None

    def replies(self, code: str | None = None) -> list[ReplyRow]:
        where, params = (" WHERE code = ?", (code,)) if code else ("", ())
        return [ReplyRow(id=r["id"], code=r["code"], reply=r["reply"], words=r["words"], who=r["who"],
                         at=r["at"], consumed_at=r["consumed_at"])
                for r in self._all(f"SELECT * FROM replies{where} ORDER BY id", params)]

    # --- providers and quota ------------------------------------------------------------------

    def providers(self) -> list[ProviderRow]:
        """Providers with quota windows, plus those that ran work here (availability unknown)."""
        by: dict[str, list[QuotaWindow]] = {}
        for r in self._all("SELECT * FROM quota_windows ORDER BY provider, window"):
            by.setdefault(r["provider"], []).append(QuotaWindow(
                provider=r["provider"], window=r["window"], used_pct=r["used_pct"],
                resets_at=r["resets_at"], blocked=bool(r["blocked"]), observed_at=r["observed_at"],
                source=r["source"], next_check_at=r["next_check_at"], backoff_s=r["backoff_s"]))
        for r in self._all("SELECT DISTINCT provider FROM runs"):
            by.setdefault(r["provider"], [])
        return [ProviderRow(p, tuple(ws)) for p, ws in sorted(by.items())]

    # --- supervisor ---------------------------------------------------------------------------

    def supervisor(self) -> SupervisorRow | None:
        rows = self._all("SELECT * FROM supervisor WHERE id = 1")
        if not rows:
            return None
        r = rows[0]
        return SupervisorRow(pid=r["pid"], started_at=r["started_at"], heartbeat_at=r["heartbeat_at"],
                             stopped_at=r["stopped_at"])
