"""Where pilothouse keeps per-user files.

PILOTHOUSE_HOME, when set, holds everything (config/, data/, state/, cache/); otherwise the
XDG base directories are used. Paths are computed on every call so tests (and a user who
changes the environment) see the current values.
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def home() -> Path | None:
    value = os.environ.get("PILOTHOUSE_HOME")
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    h = home()
    return h / "config" if h else _xdg("XDG_CONFIG_HOME", ".config") / "pilothouse"


def data_dir() -> Path:
    h = home()
    return h / "data" if h else _xdg("XDG_DATA_HOME", ".local/share") / "pilothouse"


def state_dir() -> Path:
    h = home()
    return h / "state" if h else _xdg("XDG_STATE_HOME", ".local/state") / "pilothouse"


def cache_dir() -> Path:
    h = home()
    return h / "cache" if h else _xdg("XDG_CACHE_HOME", ".cache") / "pilothouse"


def providers_dir() -> Path:
    """Per-provider run sandboxes: providers/<key>/runs/<run_id>/…"""
    return data_dir() / "providers"


def logs_dir() -> Path:
    """Run logs: logs/<key>/<run_id>.{jsonl,stderr.log,report.md,verdict.json}"""
    return state_dir() / "logs"


def runners_dir() -> Path:
    """npm prefix where `pilothouse install runner` puts the agent CLIs."""
    return data_dir() / "runners"


def secrets_dir() -> Path:
    """The explicit file backend for keys (0700 dir, 0600 files)."""
    return data_dir() / "secrets"


def repos_file() -> Path:
    """The user's list of registered repositories."""
    return config_dir() / "repos.json"


def package_data() -> Path:
    """Bundled data (provider YAML, scenarios, prompts, templates)."""
    return Path(__file__).resolve().parent.parent / "data"
