"""The agent CLIs pilothouse drives, pinned to versions tested against the sim on Node 20.

A newer CLI may change its flags or its JSON stream; runners parse exactly these versions'
output (recorded lines in tests/providers/recorded/). Bump a pin only together with those tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    runner: str  # pilothouse runner name
    package: str  # npm package
    version: str
    binary: str  # executable name under node_modules/.bin

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


PINS: dict[str, Pin] = {
    "opencode": Pin("opencode", "opencode-ai", "1.18.33", "opencode"),
    "claude-code": Pin("claude-code", "@anthropic-ai/claude-code", "2.1.197", "claude"),
    "codex": Pin("codex", "@openai/codex", "0.171.0", "codex"),
}


def npm_specs() -> list[str]:
    """`package@version` for every pinned CLI (scripts/install-runners installs these)."""
    return [p.spec for p in PINS.values()]


def pin(runner: str) -> Pin:
    from pilothouse.providers.errors import UserError

    try:
        return PINS[runner]
    except KeyError:
        raise UserError(f"no npm-installed runner '{runner}'; use one of {', '.join(PINS)}") from None
