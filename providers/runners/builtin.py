"""The builtin runner: pilothouse's own agent loop (builtin_worker.py) run as a child process.

It is launched like any agent CLI — an argv, an allow-listed environment, config on stdin — so
dispatch times, confines and kills it exactly like opencode or claude. The config carries the
path of the sandbox's credential file, never the key.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers.runners.base import LaunchSpec, Runner, RunSpec

if TYPE_CHECKING:
    from pilothouse.providers.contract_events import RunnerEvent

# What a worker (and the commands its bash tool runs) may inherit from our environment.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


def worker_env(spec: RunSpec) -> dict[str, str]:
    sb = spec.sandbox
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update({"HOME": str(sb.home), "XDG_CONFIG_HOME": str(sb.config), "XDG_DATA_HOME": str(sb.data),
                "XDG_STATE_HOME": str(sb.state), "XDG_CACHE_HOME": str(sb.cache),
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


WORKER_MODULES = ("builtin_worker", "builtin_count", "builtin_http", "builtin_stream", "builtin_tools",
                  "builtin_wire")
_bytecode_checked: list[bool] = []


def fresh_bytecode() -> None:
    """Byte code for the worker's modules next to their sources, compiled here when stale.

    The worker runs with -I (no PYTHONPYCACHEPREFIX) and usually confined, where the package dir is
    read-only: after any edit of these files it would compile them from source on every start
    (~20 ms of CPU per run) without ever being able to save the result. Checking costs a stat and a
    16-byte read per module; nothing is written when byte code is switched off (-B / PYTHONDONTWRITEBYTECODE).
    """
    if _bytecode_checked or sys.flags.dont_write_bytecode:
        return
    _bytecode_checked.append(True)
    from importlib.util import MAGIC_NUMBER

    here = Path(__file__).parent
    for name in WORKER_MODULES:
        src = here / f"{name}.py"
        pyc = here / "__pycache__" / f"{name}.{sys.implementation.cache_tag}.pyc"
        try:
            st = src.stat()
            with open(pyc, "rb") as fh:
                head = fh.read(16)
            want = MAGIC_NUMBER + (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") \
                + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            if head == want:
                continue
        except OSError:
            pass
        if not os.access(pyc.parent if pyc.parent.is_dir() else here, os.W_OK):
            return  # a read-only install: its byte code was compiled when it was installed
        import py_compile

        try:
            py_compile.compile(str(src), cfile=str(pyc), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (OSError, py_compile.PyCompileError):
            pass  # the worker then compiles it itself, as before


class BuiltinRunner(Runner):
    name = "builtin"

    def build(self, spec: RunSpec) -> LaunchSpec:
        sb = spec.sandbox
        cfg: dict[str, Any] = {
            "base_url": spec.base_url, "model": spec.model, "mode": spec.mode,
            "workdir": str(spec.workdir), "task_file": str(spec.task_file),
            "conversation": str(sb.state / "conversation.json"),
            "key_file": str(sb.credential) if sb.credential is not None else None,
            "step_cap": spec.step_cap, "timeout_s": spec.timeout_s,
            "session_id": spec.session_id, "resume": bool(spec.resume_of),
            "max_tokens": getattr(spec.provider, "output_tokens", None),
        }
        from pilothouse.providers.runners.builtin_net import network_config

        cfg.update(network_config(spec))
        # filled by the dispatch from the capability probe (core/dispatch/run.py `_counting`)
        if isinstance(spec.extra.get("counting"), dict):
            cfg["counting"] = spec.extra["counting"]
        # The worker is stdlib-only and runs as a script: `-I` keeps the (untrusted) workdir and any
        # PYTHON* variables off its import path; `-S` skips site-packages and the editable-install
        # finder (~15-60 ms of start-up the worker does not need). `python -m pilothouse...` works too.
        # -I drops PYTHONDONTWRITEBYTECODE, so carry that choice over as -B.
        flags = ["-I", "-S"] + (["-B"] if sys.flags.dont_write_bytecode else [])
        fresh_bytecode()
        argv = [sys.executable, *flags, str(Path(__file__).with_name("builtin_start.py"))]
        return LaunchSpec(argv=argv, env=worker_env(spec), cwd=spec.workdir,
                          stdin=(json.dumps(cfg) + "\n").encode())

    def parse_line(self, line: str) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c  # no pydantic: see contract_fast.py

        try:
            d = json.loads(line)
            kind = d.get("kind")
            if kind == "text":
                return [c.TextEvent(str(d["text"]))]
            if kind == "tool":
                return [c.ToolEvent(str(d["name"]), d["status"], str(d.get("brief", "")))]
            if kind == "usage":
                source = d.get("source", "measured")
                return [c.UsageEvent(int(d["input"]), int(d["output"]), int(d["reasoning"]),
                                     int(d["cache_read"]), int(d["cache_write"]), float(d["cost"]),
                                     source if source in ("measured", "estimated", "unknown") else "unknown")]
            if kind == "session":
                return [c.SessionEvent(str(d["id"]))]
            if kind == "reasoning":
                return [c.ReasoningEvent(str(d["text"]))]
            if kind == "quota":
                return [c.QuotaEvent(str(d["window"]), d.get("used_pct"), d.get("resets_at"))]
            if kind == "error":
                return [c.ErrorEvent(str(d["message"]), d.get("error_class", "fatal"))]
            if kind == "limit":
                return [c.LimitEvent(str(d["reason"]))]
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return []

    def version(self) -> str | None:
        from pilothouse import __version__

        return __version__
