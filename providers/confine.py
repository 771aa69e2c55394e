"""Confinement of worker processes (bubblewrap). Placeholder pass-through until the confinement work lands."""

from __future__ import annotations

from pilothouse.providers.runners.base import LaunchSpec, RunSpec


def prepare(launch: LaunchSpec, spec: RunSpec) -> LaunchSpec:
    """Return the launch to actually run: wrapped in bwrap where confinement applies."""
    return launch
