"""Validated provider records without paying for pydantic and PyYAML on every command.

`status` has a 0.15 s budget and `dispatch` a 0.2 s overhead budget; validating the YAML costs
~100 ms of imports alone. So the first full load (providers.registry) writes the validated
records as JSON in the cache dir, stamped with every source file's mtime and size (and the
directories' mtimes, which catch added or removed files). Later reads are a stat per file plus
one json.load; any change falls back to the full, validating load, so a bad file is still
reported with its name, field and fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pilothouse import __version__
from pilothouse.providers import paths
from pilothouse.providers.errors import UserError


class Record:
    """Read-only attribute view over a validated provider dict (same names as ProviderConfig)."""

    __slots__ = ("_d",)

    def __init__(self, data: dict[str, Any]) -> None:
        object.__setattr__(self, "_d", data)

    def __getattr__(self, name: str) -> Any:
        try:
            value = self._d[name]
        except KeyError:
            raise AttributeError(name) from None
        return Record(value) if isinstance(value, dict) else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("provider records are read-only")

    def __repr__(self) -> str:
        return f"Record({self._d!r})"

    def model_dump(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._d))

    @property
    def is_sim(self) -> bool:
        return self._d.get("base_url") == "sim:"


def _dirs() -> tuple[Path, Path]:
    return paths.package_data() / "providers", paths.config_dir() / "providers"


def _stamp() -> list[Any]:
    stamp: list[Any] = [__version__]
    for d in _dirs():
        try:
            st = d.stat()
        except OSError:
            stamp.append([str(d), None])
            continue
        stamp.append([str(d), st.st_mtime_ns])
        with os.scandir(d) as it:
            for entry in sorted(it, key=lambda e: e.name):
                if entry.name.endswith((".yaml", ".yml")) and not entry.name.startswith("."):
                    fst = entry.stat()
                    stamp.append([entry.name, fst.st_mtime_ns, fst.st_size])
    return stamp


def cache_file() -> Path:
    return paths.cache_dir() / "providers-index.json"


def records() -> dict[str, dict[str, Any]]:
    """Every provider's validated fields (plus `source`), by key."""
    stamp = _stamp()
    try:
        cached = json.loads(cache_file().read_text())
        if cached.get("stamp") == stamp:
            return dict(cached["providers"])
    except (OSError, ValueError, AttributeError):
        pass
    from pilothouse.providers.fsutil import atomic_write_json
    from pilothouse.providers.registry import load_providers

    providers = {k: {**p.model_dump(), "source": p.source} for k, p in load_providers().items()}
    try:
        atomic_write_json(cache_file(), {"stamp": stamp, "providers": providers}, mode=0o600)
    except OSError:
        pass  # a read-only cache dir only costs speed
    return providers


def record(key: str) -> Record:
    """One provider by key; UserError listing the known keys when it does not exist."""
    recs = records()
    if key not in recs:
        raise UserError(f"unknown provider '{key}'; known: {', '.join(recs)} (add your own as {key}.yaml in "
                        f"{_dirs()[1]})")
    return Record(recs[key])
