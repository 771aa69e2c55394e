"""What the capability probe found (providers/capabilities.py), per provider and model.

Kept in `<state dir>/capabilities.db` (SQLite, WAL): a model's abilities are the same for every
repository, and `pilothouse providers` lists them outside any. This module is the table's only
writer. A probe is run once per provider and model and then read from here (`--refresh`, or
`providers check`, probes again).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.fsutil import use_wal

SCHEMA = """CREATE TABLE IF NOT EXISTS capabilities (
    provider TEXT NOT NULL, model TEXT NOT NULL, probed_at TEXT NOT NULL, caps TEXT NOT NULL,
    PRIMARY KEY (provider, model))"""
PROBE_SCENARIO = "probe"  # the simulator's scripted answers to the probe (data/scenarios/probe.yaml)


def _connect() -> sqlite3.Connection:
    db = paths.state_dir() / "capabilities.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)
    conn.row_factory = sqlite3.Row
    use_wal(conn)
    conn.execute(SCHEMA)
    return conn


def record(provider: str, model: str, caps: dict[str, Any]) -> None:
    conn = _connect()
    try:
        conn.execute("INSERT INTO capabilities(provider, model, probed_at, caps) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT(provider, model) DO UPDATE SET probed_at=excluded.probed_at, caps=excluded.caps",
                     (provider, model, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), json.dumps(caps)))
    finally:
        conn.close()


def get(provider: str, model: str) -> dict[str, Any] | None:
    if not (paths.state_dir() / "capabilities.db").exists():
        return None
    conn = _connect()
    try:
        row = conn.execute("SELECT * FROM capabilities WHERE provider=? AND model=?", (provider, model)).fetchone()
    finally:
        conn.close()
    return _caps(row) if row else None


def every() -> dict[tuple[str, str], dict[str, Any]]:
    if not (paths.state_dir() / "capabilities.db").exists():
        return {}
    conn = _connect()
    try:
        return {(r["provider"], r["model"]): _caps(r) for r in conn.execute("SELECT * FROM capabilities")}
    finally:
        conn.close()


def _caps(row: sqlite3.Row) -> dict[str, Any]:
    try:
        caps = json.loads(row["caps"])
    except ValueError:
        caps = {"error": "the recorded probe is unreadable: probe again (pilothouse providers check)"}
    return {**(caps if isinstance(caps, dict) else {}), "probed_at": row["probed_at"]}


def probe_provider(rec: Any, model: str | None = None, *, scenario: str | None = None,
                   timeout_s: float = 60.0) -> dict[str, Any]:
    """Probe the provider's model (the simulator on loopback, with its probe scenario) and record
    what was found; an endpoint that could not be asked is returned but not recorded."""
    from pilothouse.providers import capabilities, keys

    model = model or rec.model_id
    if not getattr(rec, "base_url", None) or (rec.runner not in capabilities.CHAT_RUNNERS and not rec.is_sim):
        return {"model": model, "error": f"the {rec.runner} runner speaks its vendor's own API: not probed",
                "skipped": True}
    key = keys.get_key(rec.key)
    if rec.is_sim:
        from pilothouse.providers.sim.server import SimServer, load_scenario

        with SimServer(load_scenario(scenario or PROBE_SCENARIO), api_key=key) as sim:
            caps = capabilities.probe(sim.base_url + "/v1", model, key, context_default=rec.context_tokens,
                                      timeout_s=timeout_s)
    else:
        caps = capabilities.probe(rec.base_url, model, key, context_default=rec.context_tokens, timeout_s=timeout_s)
    if caps.get("error"):
        from pilothouse.providers.redact import Redactor

        # an endpoint's error text may echo what it was sent: no key reaches a terminal or a problem
        caps["error"] = Redactor([*keys.configured_secrets(), *([key] if key else [])]).redact(caps["error"])
    else:
        record(rec.key, model, caps)
    return caps


_unreachable: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
RETRY_UNREACHABLE_S = 300.0


def cached(rec: Any, model: str | None = None, *, scenario: str | None = None) -> dict[str, Any]:
    """The recorded probe of this provider and model, probing first when there is none. An
    endpoint that could not be asked is asked again only after RETRY_UNREACHABLE_S: a supervisor
    launching task after task must not wait on a dead endpoint for each."""
    import time

    model = model or rec.model_id
    found = get(rec.key, model)
    if found is not None:
        return found
    failed = _unreachable.get((rec.key, model))
    if failed is not None and time.monotonic() - failed[0] < RETRY_UNREACHABLE_S:
        return failed[1]
    caps = probe_provider(rec, model, scenario=scenario, timeout_s=20.0)
    if caps.get("error"):
        _unreachable[(rec.key, model)] = (time.monotonic(), caps)
    return caps
