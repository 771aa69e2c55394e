"""Read-only queries for what holds work up: open problems and their replies, the providers'
quota windows, the supervisor's row. Also the read-only connection every query shares.

core/queries/work.py builds the cockpit's full `Queries` on `ProblemQueries` and adds the jobs,
tasks and runs; both halves read through one lazily opened connection (`StoreReader`). The
store may not exist yet (a repository with no job): every query then answers empty, and the
connection is opened as soon as the file appears.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.store import StateBusy, StateDamaged, open_reader
from pilothouse.core.stops.problems import Problem, row_to_problem


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
    # what the capability probe found missing in the provider's model (providers/capabilities.py)
    lacks: tuple[str, ...] = ()

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
        # why the store cannot be read (lost, damaged, locked), one line for the status bar; None
        # when it reads, or when there is none yet
        self.damage: str | None = None

    @property
    def conn(self) -> sqlite3.Connection | None:
        if self._conn is None:
            try:
                self._conn = open_reader(self.layout.state_db)
                self.damage = None
            except (StateDamaged, StateBusy) as exc:
                self.damage = str(exc)
                return None
            except sqlite3.Error as exc:
                self.damage = f"{self.layout.state_db}: {exc}"
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

    def problems(self, open_only: bool = True) -> list[Problem]:
        where = " WHERE state = 'open'" if open_only else ""
        return [row_to_problem(r) for r in self._all(
            f"SELECT * FROM problems{where} ORDER BY opened_at, code")]

    def problem(self, code: str) -> Problem | None:
        rows = self._all("SELECT * FROM problems WHERE code = ?", (code,))
        return row_to_problem(rows[0]) if rows else None

    def pauses(self) -> dict[tuple[str, str | None], list[tuple[str, str | None]]]:
        """When each task (key (job, task)) and each job (key (job, None)) waited for the operator:
        every problem's (opened_at, closed_at), closed_at None while it is still open. A job waits
        on its own problems and its tasks' ones. An elapsed time that leaves these out neither keeps
        counting while the work waits nor jumps by the wait once it goes on."""
        spans: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {}
        for r in self._all("SELECT job, task, opened_at, closed_at FROM problems ORDER BY opened_at"):
            span = (r["opened_at"], r["closed_at"])
            spans.setdefault((r["job"], r["task"]), []).append(span)
            if r["task"] is not None:
                spans.setdefault((r["job"], None), []).append(span)
        return spans

    def busy(self) -> dict[str, list[tuple[str, str | None]]]:
        """Each job's worker runs (started_at, finished_at): while one runs, a task's problem does
        not make the job wait (its other tasks go on)."""
        spans: dict[str, list[tuple[str, str | None]]] = {}
        for r in self._all("SELECT job, started_at, finished_at FROM runs WHERE job IS NOT NULL"
                           " ORDER BY started_at"):
            spans.setdefault(r["job"], []).append((r["started_at"], r["finished_at"]))
        return spans

    def replies(self, code: str | None = None, *, waiting: bool = False) -> list[ReplyRow]:
        """Answers, oldest first; `waiting`: only those the supervisor has not taken yet."""
        where = [w for w, on in (("code = ?", code), ("consumed_at IS NULL", waiting)) if on]
        sql = "SELECT * FROM replies" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [ReplyRow(id=r["id"], code=r["code"], reply=r["reply"], words=r["words"], who=r["who"],
                         at=r["at"], consumed_at=r["consumed_at"])
                for r in self._all(sql, (code,) if code else ())]

    def waiting_answers(self) -> dict[str, ReplyRow]:
        """Each problem's first answer the supervisor has not taken yet, in one query."""
        waiting: dict[str, ReplyRow] = {}
        for r in self.replies(waiting=True):
            waiting.setdefault(r.code, r)
        return waiting

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
        return [ProviderRow(p, tuple(ws), _lacks(p)) for p, ws in sorted(by.items())]

    # --- supervisor ---------------------------------------------------------------------------

    def supervisor(self) -> SupervisorRow | None:
        rows = self._all("SELECT * FROM supervisor WHERE id = 1")
        if not rows:
            return None
        r = rows[0]
        return SupervisorRow(pid=r["pid"], started_at=r["started_at"], heartbeat_at=r["heartbeat_at"],
                             stopped_at=r["stopped_at"])


def _lacks(provider: str) -> tuple[str, ...]:
    """The builder's needs the probe found missing in the provider's model (nothing when unprobed)."""
    from pilothouse.providers import capabilities, capability_store, provider_index

    try:
        rec = provider_index.record(provider)
        caps = capability_store.get(provider, rec.model_id)
    except Exception:  # noqa: BLE001 - a provider since removed, an unreadable store: no marker
        return ()
    return tuple(capabilities.lacking(caps, rec.runner, "builder"))
