"""The record of the MCP server's handshake answers (core/mcp/front.py answers from it before the
SDK is imported): where each profile's record lives, what makes one current, and, for a run of an
agent CLI, the worker profile's record put beside the job's records in the run's sandbox.

It sits below core/mcp so that dispatch can hand a worker its record without importing the
server: the record is read here as a file, and made by `pilothouse mcp --record worker` in a child.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

HOST = "host"
WORKER = "worker"
# the worker's record in a job's context folder (core/dispatch/jobcontext.py)
WORKER_RECORD = "mcp-handshake.json"
RECORDER = "mcp-worker-record"  # the thread that waits for the child making the worker's record
MCP_SOURCES = Path(__file__).resolve().parent.parent / "mcp"


def fingerprint() -> str:
    """What the recorded answers depend on, cheap enough to check at every start (no SDK import):
    pilothouse's version, the server's sources and the installed SDK."""
    import importlib.util

    from pilothouse import __version__

    h = hashlib.sha256(__version__.encode())
    for f in sorted(MCP_SOURCES.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    for name in ("mcp", "mcp_types"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin:
            st = os.stat(origin)
            h.update(f"{origin}:{st.st_mtime_ns}:{st.st_size}".encode())
    return h.hexdigest()


def record_path(profile: str = HOST) -> Path:
    from pilothouse.providers.paths import cache_dir

    return cache_dir() / ("mcp-handshake.json" if profile == HOST else f"mcp-{profile}-handshake.json")


def load_record(path: Path | None = None, profile: str = HOST) -> dict[str, Any] | None:
    """The record at `path` (default: the profile's in the host's cache) when it is current and of
    `profile`; None otherwise (then every message waits for the SDK)."""
    try:
        data = json.loads((path or record_path(profile)).read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("fingerprint") != fingerprint()
            or data.get("profile", HOST) != profile):
        return None
    return data


def worker_record(dest: Path) -> None:
    """Put the worker profile's record into a job's context folder `dest` from the host's cache;
    without one there, have a child make it (this run's server waits for the SDK, the next one
    does not). The child is the host's: the record never comes from the sandbox."""
    from pilothouse.providers.fsutil import atomic_write_text

    record = load_record(profile=WORKER)
    if record is not None:
        atomic_write_text(dest / WORKER_RECORD, json.dumps(record), mode=0o600, durable=False)
        return
    import subprocess

    from pilothouse.providers.hostpython import python_argv

    argv = python_argv("-m", "pilothouse", "mcp", "--record", WORKER)
    threading.Thread(target=subprocess.run, args=(argv,), name=RECORDER, daemon=True,
                     kwargs={"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "check": False}).start()
