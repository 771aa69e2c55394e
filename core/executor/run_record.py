"""A cluster run's record, `.ai/runtime/runs/<run>.cluster.json`: the base pushed for it and, once
placed, its node and the actor that is the run's (its own, `run-<id>`, or a spare it claimed), by
which a supervisor started again finds it (cluster.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout


def namespace_of(layout: RepoLayout) -> str:
    return "pilothouse-" + hashlib.sha256(str(layout.root.resolve()).encode()).hexdigest()[:16]


def actor_name(run_id: str) -> str:
    return f"run-{run_id}"


def record_path(layout: RepoLayout, run_id: str) -> Any:
    return runs.run_files(layout, run_id)["spec"].with_name(f"{run_id}.cluster.json")


def read_record(layout: RepoLayout, run_id: str) -> dict[str, Any] | None:
    try:
        data = json.loads(record_path(layout, run_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_actor(record: dict[str, Any] | None, run_id: str) -> str:
    """The name of run `run_id`'s actor: a spare it claimed (named in its record) or its own."""
    return str((record or {}).get("actor") or actor_name(run_id))


def named_actors(layout: RepoLayout) -> set[str]:
    """Every actor a run record of the repository names."""
    folder = record_path(layout, "").parent
    runs_recorded = [p.name.removesuffix(".cluster.json") for p in folder.glob("*.cluster.json")]
    return {str(r["actor"]) for r in (read_record(layout, run) for run in runs_recorded)
            if r is not None and isinstance(r.get("actor"), str)}


def write_record(layout: RepoLayout, run_id: str, data: dict[str, Any]) -> None:
    from pilothouse.providers.fsutil import atomic_write_json

    atomic_write_json(record_path(layout, run_id), data, mode=0o600)
