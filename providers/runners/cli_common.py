"""What the three agent-CLI runners (opencode, claude-code, codex) do alike.

Each prints one JSON object a line and is launched the same way once its argv and environment
are known: the prompt on stdin, the run's worktree as cwd, and its npm prefix (plus the key
file a symlinked credential points at) readable under confinement.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from pilothouse.providers.runners.base import LaunchSpec, RunSpec
from pilothouse.providers.runners.npm import NpmRunner

if TYPE_CHECKING:
    from pilothouse.providers.contract_events import RunnerEvent


class CliRunner(NpmRunner):
    """An npm agent CLI whose stdout is JSON lines."""

    # it starts MCP servers: dispatch hands it the job's read-only server (spec.extra["mcp_worker"])
    speaks_mcp = True

    def launch(self, spec: RunSpec, argv: list[str], env: dict[str, str]) -> LaunchSpec:
        readonly = self.install_root()
        cred = spec.sandbox.credential
        if cred is not None and cred.is_symlink():
            readonly.append(cred.resolve())  # the key file itself lives outside the sandbox
        return LaunchSpec(argv=argv, env=env, cwd=spec.workdir, stdin=self.prompt(spec), readonly=readonly)

    def parse_line(self, line: str) -> list[RunnerEvent]:
        try:
            d = json.loads(line)
        except ValueError:
            return []
        if not isinstance(d, dict):
            return []
        try:
            return self._events(d)
        except (KeyError, TypeError, ValueError, AttributeError):
            return []  # a shape this CLI version does not print: nothing, never a crash

    @abstractmethod
    def _events(self, d: dict[str, Any]) -> list[RunnerEvent]:
        """Normalised events from one decoded stdout object."""


def job_server(spec: RunSpec) -> dict[str, Any] | None:
    """The worker's read-only MCP server of its job ({name, command, args}; see
    core/dispatch/jobcontext.py), or None: each runner writes it into the run's own config, never
    the operator's, and only that server (the repository's MCP settings stay off)."""
    server = spec.extra.get("mcp_worker")
    return server if isinstance(server, dict) else None


def window_in(pattern: re.Pattern[str], text: str) -> str:
    """The quota window a CLI's error text names (`pattern` has two alternative groups)."""
    m = pattern.search(text)
    return (m.group(1) or m.group(2)).lower() if m else "unknown"


def epoch_iso(value: Any) -> str | None:
    """A reset time given as epoch seconds, as UTC ISO-8601 (None when it is not a number)."""
    from datetime import UTC, datetime

    if not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
