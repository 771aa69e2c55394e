"""The provider registry: bundled data/providers/*.yaml, overridden by the user's config dir.

A user file whose key matches a bundled provider overrides only the fields it names (so
`model_id: glm-4.5` alone is a valid override); a new key must be a complete record. A bad file
is a UserError naming the file, the field and the fix — never skipped.

This module imports pydantic and PyYAML; hot paths (`status`, `dispatch`) read the validated
records through providers.provider_index, which caches them as JSON.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError, single_line
from pilothouse.providers.modes import MODES
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

RUNNERS = ("builtin", "opencode", "claude-code", "codex")
RESERVED_KEYS = ("runner", "all", "on", "for", "key", "claude", "codex")
if TYPE_CHECKING:
    Mode = str  # mypy cannot read a Literal built from a tuple; pydantic validates the real one
else:
    Mode = Literal[MODES]  # Literal[("a", "b")] is Literal["a", "b"]

# What to say when a field is wrong: the fix, not just the complaint.
_FIXES = {
    "key": "use lowercase letters, digits, '-', '.' or '_'",
    "runner": f"use one of {', '.join(RUNNERS)}",
    "base_url": "use an http(s):// URL of an OpenAI-compatible endpoint (or 'sim:' for the simulator)",
    "suitable_modes": f"use modes from {', '.join(MODES)}",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cost(_Strict):
    """USD per 1M tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float | None = None
    cache_write: float | None = None


class QuotaWindow(_Strict):
    name: str
    hours: float | None = None
    limit_tokens: int | None = None
    limit_requests: int | None = None


class Quota(_Strict):
    windows: list[QuotaWindow] = Field(default_factory=list)


class ProviderConfig(_Strict):
    key: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64)
    provider_id: str
    model_id: str
    base_url: str
    display_name: str
    context_tokens: int = Field(128_000, gt=0)
    output_tokens: int = Field(8_192, gt=0)
    runner: Literal["builtin", "opencode", "claude-code", "codex"] = "builtin"
    permissions: str | None = None
    effort: str | None = None
    cost: Cost = Field(default_factory=Cost)
    quota: Quota = Field(default_factory=Quota)
    strengths: list[str] = Field(default_factory=list)
    suitable_modes: list[Mode] = Field(default_factory=lambda: list(MODES))
    notes: str = ""
    # False for local endpoints and the sim: a key is accepted but not required
    needs_key: bool = True
    # sim only: the scenario used when neither --scenario nor PILOTHOUSE_SIM_SCENARIO names one
    scenario: str | None = None

    _source: str = PrivateAttr(default="")

    @field_validator("key")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if v in RESERVED_KEYS:
            raise ValueError(f"'{v}' is reserved ({', '.join(RESERVED_KEYS)})")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v != "sim:" and not v.startswith(("http://", "https://")):
            raise ValueError(f"'{v}' is not an http(s) URL")
        return v.rstrip("/")

    @property
    def source(self) -> str:
        """The file(s) this record came from (bundled, then the user's override)."""
        return self._source

    @property
    def is_sim(self) -> bool:
        return self.base_url == "sim:"


def bundled_dir() -> Path:
    return paths.package_data() / "providers"


def user_dir() -> Path:
    return paths.config_dir() / "providers"


def _read_yaml(path: Path) -> dict[str, Any]:
    from pilothouse.providers.userfile import read_yaml

    try:
        data = read_yaml(path, str(path))
    except FileNotFoundError:
        if path.is_symlink():
            raise UserError(f"{path}: a link to {os.readlink(path)!r}, which does not exist: remove the link "
                            "or point it at a provider file") from None
        raise UserError(f"{path}: vanished while being read: run the command again") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of provider fields (key: ..., model_id: ...)")
    return data


def _validate(data: dict[str, Any], source: str) -> ProviderConfig:
    try:
        cfg = ProviderConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        top = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(ProviderConfig.model_fields)
            msg = f"unknown field '{loc}'; remove it (allowed: {allowed})"
        elif err["type"] == "missing":
            msg = f"missing required field '{loc}'; add it"
        else:
            fix = _FIXES.get(top, "correct the value")
            msg = f"field '{loc}': {err['msg']}; {fix}"
        raise UserError(single_line(f"{source}: {msg}")) from None
    cfg._source = source
    return cfg


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith("."))


def load_providers() -> dict[str, ProviderConfig]:
    """Every provider by key, user overrides applied. Raises UserError on the first bad file."""
    bundled: dict[str, tuple[dict[str, Any], Path]] = {}
    for path in _files(bundled_dir()):
        data = _read_yaml(path)
        if not isinstance(data.get("key"), str):
            raise UserError(f"{path}: missing required field 'key'; add it")
        bundled[data["key"]] = (data, path)
    user: dict[str, tuple[dict[str, Any], Path]] = {}
    for path in _files(user_dir()):
        data = _read_yaml(path)
        key = data.get("key")
        if not isinstance(key, str):
            raise UserError(f"{path}: missing required field 'key' (the provider to add or override); add it")
        if key in user:
            raise UserError(f"{path}: provider '{key}' is also defined in {user[key][1]}; keep one of them")
        user[key] = (data, path)
    out: dict[str, ProviderConfig] = {}
    for key in sorted({*bundled, *user}):
        if key in user and key in bundled:
            data, path = user[key]
            cfg = _validate({**bundled[key][0], **data}, str(path))  # errors name the user's file
            cfg._source = f"{path} (override of {bundled[key][1]})"
        else:
            data, path = user.get(key) or bundled[key]
            cfg = _validate(data, str(path))
        out[key] = cfg
    return out


def labelled(spec: str | None) -> str:
    """`provider[/model]` as shown to the operator: a simulator says so (its replies are scripted,
    not a model's). By name: the bundled `sim` and `sim-*` providers, without loading every file."""
    from pilothouse.providers.usage import is_simulator

    if not spec:
        return str(spec)
    return f"{spec} (simulator)" if is_simulator(spec) else spec
