"""What every runner provides (the events they emit: docs/contracts.md, "Runner events").

A runner turns a RunSpec into a LaunchSpec (argv, allow-listed environment, stdin, cwd) and
turns each line its process prints on stdout into normalised events (providers.contract_events).
Dispatch owns the process: spawning (confined), timeouts, signals, logs and the verdict.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # runtime import would pull pydantic (~100 ms) into every runner and status
    from pilothouse.providers.contract_events import RunnerEvent


@dataclass
class Sandbox:
    """The per-run sandbox: providers/<key>/runs/<run_id>/{home,config,data,state,cache}."""

    root: Path
    home: Path
    config: Path
    data: Path
    state: Path
    cache: Path
    shared_cache: Path  # per-provider cache shared by runs
    credential: Path | None = None  # 0600 file (or symlink to one) holding the key, inside the sandbox


@dataclass
class RunSpec:
    run_id: str
    provider: Any  # providers.registry.ProviderConfig
    mode: str
    model: str
    base_url: str
    workdir: Path
    sandbox: Sandbox
    task_text: str
    task_file: Path  # 0600 copy of the task inside the sandbox
    step_cap: int
    timeout_s: float
    idle_timeout_s: float
    session_id: str | None = None  # set on resume
    resume_of: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # the complete child environment (an allow-list, never os.environ)
    cwd: Path
    stdin: bytes | None = None  # None means /dev/null
    # paths the child must be able to write besides its sandbox (confinement reads this)
    writable: list[Path] = field(default_factory=list)
    readonly: list[Path] = field(default_factory=list)


class Runner(ABC):
    name: str = ""
    # the npm package that provides it, if any (used by `install runner`)
    npm_package: str | None = None

    @abstractmethod
    def build(self, spec: RunSpec) -> LaunchSpec:
        """Argv, environment and stdin for this run. The key never goes in argv."""

    @abstractmethod
    def parse_line(self, line: str) -> list[RunnerEvent]:
        """Normalised events from one stdout line. Unknown lines yield nothing, never raise."""

    def installed(self) -> bool:
        return True

    def version(self) -> str | None:
        return None

    def final_text(self) -> str | None:
        """The worker's final answer text when the stream carries it separately (else: joined text events)."""
        return None
