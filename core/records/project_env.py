"""The parts of `.ai/project.yaml` that shape a worker's environment: what its sandbox shows
beyond the worktree (`sandbox.read`, `sandbox.share`) and how a new worktree is set up (`setup:`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SandboxSettings(Strict):
    """What a worker's or gate's sandbox shows beyond its worktree (docs/sandbox.md)."""

    # bound read-only into every sandbox: a project venv, a toolchain, a package cache. Relative
    # paths are the main checkout's, which the sandbox otherwise hides apart from its .git
    read: list[str] = Field(default_factory=list)
    # the checkout's dependency folders (.venv, node_modules), read-only in every builder's and
    # gate's sandbox at their place in the checkout and in the worktree; the code stays the worktree's
    share: list[str] = Field(default_factory=list)

    @field_validator("share")
    @classmethod
    def _shared(cls, v: list[str]) -> list[str]:
        for p in v:
            if not isinstance(p, str) or not p.strip().strip("/") or p.strip() == ".":
                raise ValueError("sandbox.share: an entry is empty: name a folder of the repository, e.g. .venv")
            if p.strip().startswith(("/", "~")) or ".." in Path(p).parts:
                raise ValueError(f"sandbox.share: '{p}' must be a folder inside the repository (e.g. .venv or "
                                 "node_modules); an outside path goes in sandbox.read")
        return [p.strip().strip("/") for p in v]

    @field_validator("read")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for p in v:
            if not isinstance(p, str) or not p.strip():
                raise ValueError("an entry is empty: name a directory or file, e.g. .venv")
            parts = Path(p).parts
            if ".." in parts or p.strip() in ("/", "~", ".", "./"):
                raise ValueError(f"'{p}' would show far more than a tool needs: name the directory it "
                                 "reads (e.g. .venv or /opt/toolchain), with no '..'")
        return [p.strip() for p in v]


class SetupCache(Strict):
    """Keep what a setup command made, per content of the files that decide it (lockfiles)."""

    key: list[str] = Field(min_length=1)  # e.g. [package-lock.json]
    paths: list[str] = Field(min_length=1)  # what the command makes, e.g. [node_modules]

    @field_validator("key", "paths")
    @classmethod
    def _inside(cls, v: list[str]) -> list[str]:
        for p in v:
            if not isinstance(p, str) or not p.strip("/ ") or p.startswith(("/", "~")) or ".." in Path(p).parts:
                raise ValueError(f"'{p}' must be a path inside the repository (e.g. package-lock.json, node_modules)")
        return [p.strip().strip("/") for p in v]


class SetupStep(Strict):
    run: str
    cache: SetupCache | None = None


RAY_ROLES = ("assigner", "builder", "reviewer")


class RaySettings(Strict):
    """`ray:` — where the Ray executor sends runs (docs/executors.md)."""

    address: str | None = None  # host:port of the cluster's head (its GCS)
    # a bare repository every node can reach (a path or a git URL); None: <repo>/.ai/hub.git
    hub: str | None = None
    roles: list[str] = Field(default_factory=lambda: ["builder"])
    # Ray custom resources each cluster run asks for: where it may be placed
    resources: dict[str, float] = Field(default_factory=dict)
    # run actors kept placed and warm for the next runs (core/executor/spares.py); 0: none
    spares: int = Field(default=2, ge=0, le=16)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, _, port = v.strip().removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{v!r} is not host:port (say 127.0.0.1:6379, the head's --port)")
        return v.strip()

    @field_validator("hub")
    @classmethod
    def _hub(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v.strip().startswith("-") or any(c in v for c in "\0\n")):
            raise ValueError(f"{v!r} is not a path or git URL of a bare repository")
        return v.strip() if v else v

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if r not in RAY_ROLES]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} is no role; use some of {', '.join(RAY_ROLES)}")
        return v

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if not name.strip() or amount <= 0:
                raise ValueError(f"{name!r}: {amount} must be a named, positive amount "
                                 "(say pilothouse_worker: 1)")
        return v
