"""Runner lookup. Each runner module is imported only when asked for: importing them all would
cost every command (and the builtin worker process, which imports this package) their imports."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.providers.runners.base import Runner

# runner name -> "module:Class" (module relative to this package)
RUNNERS: dict[str, str] = {
    "builtin": "builtin:BuiltinRunner",
    "opencode": "opencode:OpenCodeRunner",
    "claude-code": "claude_code:ClaudeCodeRunner",
    "codex": "codex:CodexRunner",
}


def get_runner(name: str) -> Runner:
    """A fresh runner instance (runners keep per-run parse state, so never share one)."""
    target = RUNNERS.get(name)
    if target is None:
        raise UserError(f"unknown runner '{name}'; known: {', '.join(RUNNERS)}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(f"pilothouse.providers.runners.{module}"), cls)()
