"""Provider usage windows and availability (five-hour, weekly, and whatever a provider reports).

Observations come from runs (a verdict's quota list and `error_class: quota`, i.e. HTTP 429 with
reset headers, or runner rate-limit events) and from availability checks. Rules:

- a reset time permits another check; it is never proof that the provider is back;
- no reset time: record the uncertainty and back off (30 min, then 60, capped) — never invent one;
- a blocked weekly window stands even when the five-hour window resets;
- checks are coalesced per provider: `claim_check` hands out one at a time, at most every
  `availability_poll_seconds`; only a successful check (`record_ok`) makes a provider available.

Every function takes `now` (an aware datetime) so tests drive hours of windows without sleeping.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog, parse_ts, utc_now_iso
from pilothouse.core.stops.problems import _db, _tx

BACKOFF_S = (1800, 3600)        # no reset time given: 30 min, then 60, capped there
DEFAULT_POLL_S = 300
FULL_PCT = 100.0


@dataclass
class Availability:
    available: bool
    reason: str
    next_check_at: datetime | None = None
    check_due: bool = False     # blocked, but a check may run now (see claim_check)

    def as_dict(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason, "check_due": self.check_due,
                "next_check_at": utc_now_iso(self.next_check_at) if self.next_check_at else None}


def _now(now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)).astimezone(UTC)


def _fmt(dt: datetime, now: datetime) -> str:
    delta = dt - now
    secs = int(delta.total_seconds())
    if secs <= 0:
        return f"{utc_now_iso(dt)} (passed)"
    if secs < 120:
        return f"{utc_now_iso(dt)} (in {secs} s)"
    if secs < 7200:
        return f"{utc_now_iso(dt)} (in {secs // 60} min)"
    return f"{utc_now_iso(dt)} (in {secs / 3600:.1f} h)"


def windows(layout: RepoLayout, provider: str | None = None, *,
            conn: sqlite3.Connection | None = None) -> list[dict[str, Any]]:
    if conn is None and not layout.state_db.exists():
        return []
    with _db(layout, conn) as db:
        sql = "SELECT * FROM quota_windows"
        args: tuple[str, ...] = ()
        if provider is not None:
            sql, args = sql + " WHERE provider = ?", (provider,)
        return [dict(r) for r in db.execute(sql + " ORDER BY provider, window", args)]


def record_quota(layout: RepoLayout, provider: str, window: str, used_pct: float | None,
                 resets_at: datetime | str | None, source: str, now: datetime | None = None, *,
                 blocked: bool | None = None, conn: sqlite3.Connection | None = None,
                 log: EventLog | None = None, job: str | None = None, task: str | None = None,
                 run: str | None = None) -> dict[str, Any]:
    """Record one window observation; events quota.changed when its blocked state or reset moved.

    `blocked` defaults to used_pct ≥ 100 (a 429 counts as blocked whatever the percentage).
    """
    at = _now(now)
    reset = parse_ts(resets_at) if isinstance(resets_at, str) else resets_at
    if blocked is None:
        blocked = source == "http-429" or (used_pct is not None and used_pct >= FULL_PCT)
    with _db(layout, conn) as db:
        with _tx(db):
            prev = db.execute("SELECT * FROM quota_windows WHERE provider = ? AND window = ?",
                              (provider, window)).fetchone()
            backoff = 0
            if blocked and reset is None:
                # uncertainty: each consecutive observation without a reset time backs off further
                prev_backoff = prev["backoff_s"] if prev is not None and prev["blocked"] else 0
                backoff = next((b for b in BACKOFF_S if b > prev_backoff), BACKOFF_S[-1])
                next_check = at + timedelta(seconds=backoff)
            elif blocked and reset is not None:
                next_check = max(reset, at)
            else:
                next_check = None
            db.execute(
                "INSERT INTO quota_windows(provider, window, used_pct, resets_at, blocked, observed_at,"
                " source, next_check_at, backoff_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(provider, window) DO UPDATE SET used_pct = excluded.used_pct,"
                " resets_at = excluded.resets_at, blocked = excluded.blocked,"
                " observed_at = excluded.observed_at, source = excluded.source,"
                " next_check_at = excluded.next_check_at, backoff_s = excluded.backoff_s",
                (provider, window, used_pct, utc_now_iso(reset) if reset else None, int(blocked), utc_now_iso(at),
                 source, utc_now_iso(next_check) if next_check else None, backoff))
    row = {"provider": provider, "window": window, "used_pct": used_pct, "blocked": bool(blocked),
           "resets_at": utc_now_iso(reset) if reset else None, "source": source, "observed_at": utc_now_iso(at),
           "next_check_at": utc_now_iso(next_check) if next_check else None, "backoff_s": backoff}
    changed = (prev is None or bool(prev["blocked"]) != bool(blocked) or prev["resets_at"] != row["resets_at"]
               or (blocked and reset is None))
    if changed:
        if blocked and reset is None:
            row["reason"] = (f"{provider} {window} limit hit with no reset time given: "
                             f"next check in {backoff // 60} min (backoff)")
        elif blocked:
            row["reason"] = f"{provider} {window} limit hit; a check may run after {utc_now_iso(next_check)}"
        else:
            row["reason"] = f"{provider} {window} at {used_pct if used_pct is not None else '?'}% — usable"
        (log or EventLog(layout.events)).append("quota.changed", job=job, task=task, run=run, data=row)
    return row


def record_verdict(layout: RepoLayout, provider: str, verdict: dict[str, Any], now: datetime | None = None,
                   **kw: Any) -> bool:
    """Feed a run's verdict: its quota windows, and a usage-limit stop (verdict `quota` or
    error_class `quota`). Returns True when the run stopped on a usage limit (the task waits).
    A run that got an answer is an authoritative check: the provider works."""
    at = _now(now)
    limited = verdict.get("verdict") == "quota" or verdict.get("error_class") == "quota"
    reported = verdict.get("quota") or []
    for q in reported:
        window = str(q.get("window") or "unknown")
        resets = q.get("resets_at")
        if resets is None and q.get("retry_after_s") is not None:
            resets = at + timedelta(seconds=float(q["retry_after_s"]))
        record_quota(layout, provider, window, q.get("used_pct"), resets,
                     "http-429" if limited else str(q.get("source") or "run"), at,
                     blocked=True if limited else None, **kw)
    if limited and not reported:
        record_quota(layout, provider, "unknown", None, None, "http-429", at, blocked=True, **kw)
    if not limited and verdict.get("verdict") in ("completed", "partial"):
        since = None
        if kw.get("run"):
            # only a run that started after a block was observed proves anything about it
            with _db(layout, kw.get("conn")) as db:
                row = db.execute("SELECT started_at FROM runs WHERE run_id = ?", (kw["run"],)).fetchone()
            since = parse_ts(row["started_at"]) if row is not None else None
        record_ok(layout, provider, "run", at, since=since,
                  **{k: v for k, v in kw.items() if k in ("conn", "log")})
    return limited


def record_ok(layout: RepoLayout, provider: str, source: str, now: datetime | None = None, *,
              since: datetime | None = None, conn: sqlite3.Connection | None = None,
              log: EventLog | None = None) -> None:
    """A request to the provider succeeded: its blocked windows are lifted.

    `since`: when the successful work started; blocks observed after it stand (a run already
    under way when a 429 arrived may have made its last request before the limit hit)."""
    at = _now(now)
    cutoff = utc_now_iso(since) if since is not None else utc_now_iso(at)
    with _db(layout, conn) as db:
        with _tx(db):
            blocked = db.execute("SELECT window FROM quota_windows WHERE provider = ? AND blocked = 1"
                                 " AND observed_at <= ?", (provider, cutoff)).fetchall()
            # a lifted window's last percentage (100) is no longer true, and the new one is unknown
            db.execute("UPDATE quota_windows SET used_pct = CASE WHEN blocked = 1 THEN NULL ELSE used_pct END,"
                       " blocked = 0, backoff_s = 0, next_check_at = NULL, observed_at = ?, source = ?"
                       " WHERE provider = ? AND (blocked = 0 OR observed_at <= ?)",
                       (utc_now_iso(at), source, provider, cutoff))
    if blocked:
        (log or EventLog(layout.events)).append("quota.changed", data={
            "provider": provider, "blocked": False, "source": source, "observed_at": utc_now_iso(at),
            "windows": [r["window"] for r in blocked],
            "reason": f"{provider} answered a request ({source}): available again"})


def availability(layout: RepoLayout, provider: str, now: datetime | None = None, *,
                 conn: sqlite3.Connection | None = None) -> Availability:
    """Whether work may launch on `provider` now, why, and when to look again."""
    at = _now(now)
    rows = windows(layout, provider, conn=conn)
    blocked = [r for r in rows if r["blocked"]]
    if not blocked:
        return Availability(True, f"{provider}: no usage limit recorded" if not rows else
                            f"{provider}: within its usage windows")
    # the latest wait wins: a weekly block stands even if the five-hour window has reset
    waits = [(parse_ts(r["next_check_at"]) or at, r) for r in blocked]
    until, row = max(waits, key=lambda w: w[0])
    if until > at:
        if row["resets_at"]:
            why = f"{provider} {row['window']} limit reached; resets {_fmt(until, at)}, then a check"
        else:
            why = (f"{provider} {row['window']} limit reached with no reset time; "
                   f"next check {_fmt(until, at)} (backoff {row['backoff_s'] // 60} min)")
        return Availability(False, why, until)
    names = ", ".join(sorted(r["window"] for r in blocked))
    return Availability(False, f"{provider} {names}: reset time passed; waiting for a check to confirm",
                        at, check_due=True)


def claim_check(layout: RepoLayout, provider: str, now: datetime | None = None,
                poll_s: int = DEFAULT_POLL_S, *, conn: sqlite3.Connection | None = None) -> bool:
    """Take the one check a blocked provider is due (a probe request, or one waiting task's run).

    Coalesced per provider: the winner pushes next_check_at forward by poll_s, so concurrent
    callers and later ticks wait for its outcome (record_ok / record_quota) instead of piling on.
    """
    at = _now(now)
    with _db(layout, conn) as db:
        with _tx(db):
            rows = db.execute("SELECT * FROM quota_windows WHERE provider = ? AND blocked = 1",
                              (provider,)).fetchall()
            if not rows or any((parse_ts(r["next_check_at"]) or at) > at for r in rows):
                return False
            db.execute("UPDATE quota_windows SET next_check_at = ? WHERE provider = ? AND blocked = 1",
                       (utc_now_iso(at + timedelta(seconds=poll_s)), provider))
    return True


def check_failed(layout: RepoLayout, provider: str, now: datetime | None = None, *,
                 conn: sqlite3.Connection | None = None, log: EventLog | None = None) -> None:
    """A check ran and the provider still refused, with no new reset time: back off."""
    for r in windows(layout, provider, conn=conn):
        if r["blocked"]:
            record_quota(layout, provider, r["window"], r["used_pct"], None, "check", now, blocked=True,
                         conn=conn, log=log)


def may_launch(layout: RepoLayout, provider: str, now: datetime | None = None, poll_s: int = DEFAULT_POLL_S, *,
               conn: sqlite3.Connection | None = None) -> Availability:
    """What a launcher asks before starting work on `provider`.

    Available: go. A check is due (the reset time passed): the first caller gets it — its run is
    the check, and its verdict (record_verdict) decides for everyone; the others keep waiting.
    """
    av = availability(layout, provider, now, conn=conn)
    if av.available or not av.check_due:
        return av
    if claim_check(layout, provider, now, poll_s, conn=conn):
        return Availability(True, f"{provider}: the reset time passed; this run checks whether it is back",
                            check_due=True)
    return availability(layout, provider, now, conn=conn)
