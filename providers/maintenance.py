"""Pruning old run sandboxes and run logs (`pilothouse maintain runs|logs`).

A run is never pruned while its lock names a live process. `keep` protects the newest M runs per
provider whatever their age. A resumed run's sandbox is a symlink to the original's; pruning the
original also removes the links that point to it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from pilothouse.providers import paths, sandbox

LATEST_MAX_BYTES = 2_000_000
LATEST_KEEP_BYTES = 500_000
_LOG_SUFFIXES = (".jsonl", ".stderr.log", ".report.md", ".verdict.json")


def _age_days(mtime: float, now: float) -> float:
    return (now - mtime) / 86400


def prune_runs(older_than_days: float, keep: int = 0, dry_run: bool = False) -> list[dict[str, Any]]:
    now = time.time()
    removed: list[dict[str, Any]] = []
    base = paths.providers_dir()
    if not base.is_dir():
        return removed
    for prov in sorted(p for p in base.iterdir() if p.is_dir()):
        runs = prov / "runs"
        if not runs.is_dir():
            continue
        real = [p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()]
        real.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        gone: set[Path] = set()
        for i, run in enumerate(real):
            age = _age_days(run.stat().st_mtime, now)
            if i < keep or age < older_than_days or sandbox.lock_holder(run) is not None:
                continue
            removed.append({"provider": prov.name, "run_id": run.name, "path": str(run), "age_days": round(age, 1)})
            gone.add(run.resolve())
            if not dry_run:
                shutil.rmtree(run, ignore_errors=True)
        for link in [p for p in runs.iterdir() if p.is_symlink()]:
            target = Path(os.readlink(link))
            if target.resolve() in gone or not target.exists():
                if not dry_run:
                    link.unlink()
    return removed


def prune_logs(older_than_days: float, keep: int = 0, dry_run: bool = False) -> list[dict[str, Any]]:
    now = time.time()
    removed: list[dict[str, Any]] = []
    base = paths.logs_dir()
    if not base.is_dir():
        return removed
    for prov in sorted(p for p in base.iterdir() if p.is_dir()):
        groups: dict[str, list[Path]] = {}
        for f in prov.iterdir():
            for suf in _LOG_SUFFIXES:
                if f.name.endswith(suf):
                    groups.setdefault(f.name[: -len(suf)], []).append(f)
                    break
        ordered = sorted(groups.items(), key=lambda kv: max(f.stat().st_mtime for f in kv[1]), reverse=True)
        for i, (run_id, files) in enumerate(ordered):
            age = _age_days(max(f.stat().st_mtime for f in files), now)
            if i < keep or age < older_than_days:
                continue
            removed.append({"provider": prov.name, "run_id": run_id, "files": len(files), "age_days": round(age, 1)})
            if not dry_run:
                for f in files:
                    f.unlink(missing_ok=True)
    _trim_latest(dry_run)
    return removed


def _trim_latest(dry_run: bool) -> None:
    """latest.log is append-only for `tail -f`; keep its tail when it grows large."""
    latest = paths.logs_dir() / "latest.log"
    try:
        size = latest.stat().st_size
    except OSError:
        return
    if size <= LATEST_MAX_BYTES or dry_run:
        return
    with open(latest, "rb") as fh:
        fh.seek(size - LATEST_KEEP_BYTES)
        tail = fh.read()
    tail = tail[tail.find(b"\n") + 1:]
    tmp = latest.with_name(".latest.log.tmp")
    tmp.write_bytes(tail)
    os.chmod(tmp, 0o600)
    os.replace(tmp, latest)
