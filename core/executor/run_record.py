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
    folder = record_path(layout, "x").parent
    names = set()
    for path in folder.glob("*.cluster.json") if folder.is_dir() else ():
        try:
            actor = json.loads(path.read_text()).get("actor")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(actor, str):
            names.add(actor)
    return names


def write_record(layout: RepoLayout, run_id: str, data: dict[str, Any]) -> None:
    from pilothouse.providers.fsutil import atomic_write_json

    atomic_write_json(record_path(layout, run_id), data, mode=0o600)
