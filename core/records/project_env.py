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
