"""The read half of the probe: what a confined process must not read, and the host-side check that
a module planted in a worktree is never imported by pilothouse's own processes.

Each read target holds a canary written on the host just before; a check passes when the canary
does not come back from inside the sandbox, whatever the route: the plain path, a symlink planted
in the worktree, a `..` walk out of it, or /proc/self/root.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.hostpython import host_env, python_argv
from pilothouse.providers.runners.base import LaunchSpec, RunSpec

# Runs inside the sandbox: reads each path, reports "read:<text>" or the errno name, never raises.
READER = r"""
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as fh:
            out[path] = "read:" + fh.read(4096).decode("utf-8", "replace")
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""


def run_inside(spec: RunSpec, code: str, args: list[str], env: dict[str, str],
               timeout: float = 30) -> dict[str, str]:
    """Run `code` with this Python, confined for `spec` (the real wrap); its last line as JSON."""
    import sys

    from pilothouse.providers.confine import mounts

    launch = LaunchSpec(argv=[sys.executable, "-I", "-c", code, *args], env=env, cwd=spec.workdir)
    wrapped = mounts.wrap(launch, spec)
    try:
        proc = subprocess.run(wrapped.argv, env=wrapped.env, cwd=wrapped.cwd, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {a: f"timed out after {timeout:g}s" for a in args}
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {a: f"failed to start: {err}" for a in args}
    return {str(k): str(v) for k, v in result.items()}


def _plant(path: Path, text: str, planted: list[Path]) -> None:
    """Write the canary; directories it needs (a key store not made yet) are made private and
    listed in `planted` too, so the clean-up leaves the user's places as they were."""
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for d in reversed(missing):
        d.mkdir(mode=0o700)
        planted.append(d)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    planted.append(path)


def read_checks(spec: RunSpec, main: Path, own: Path, tag: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """Reads that must not reach the host's files: keys, $HOME, the main checkout, by every route."""
    canary = f"{tag}-canary"
    home = Path(os.path.realpath(Path.home()))
    planted: list[Path] = []
    try:
        key = paths.secrets_dir() / f".{tag}.key"  # stands for the other providers' keys
        home_file = home / f".{tag}-home.txt"
        env_file = main / ".env"  # an untracked file of the operator's checkout
        for p in (key, home_file, env_file):
            _plant(p, canary, planted)
        for target, link in ((key, own / f"{tag}-key-link"), (env_file, own / f"{tag}-env-link")):
            os.symlink(target, link)
            planted.append(link)
        depth = len(own.parts) - 1
        dots = Path(*([".."] * depth))
        cases = [
            ("read: another provider's key", str(key)),
            ("read: $HOME", str(home_file)),
            ("read: main checkout's untracked .env", str(env_file)),
            ("read: a link in the worktree to a key", str(own / f"{tag}-key-link")),
            ("read: a link in the worktree to the main checkout", str(own / f"{tag}-env-link")),
            ("read: a '..' route out of the worktree", str(own / dots / str(env_file).lstrip("/"))),
            ("read: /proc/self/root", f"/proc/self/root{home_file}"),
        ]
        outcome = run_inside(spec, READER, [p for _n, p in cases], env)
        results = []
        for name, path in cases:
            child = outcome.get(path, "not attempted")
            leaked = canary in child
            # proven only by the kernel's refusal (an errno name): a reader that never ran proves nothing
            refused = child.startswith("E") and child.isupper()
            results.append({"check": name, "path": path, "expect": "blocked",
                            "child": "read" if child.startswith("read:") else child, "reached_host": leaked,
                            "pass": refused and not leaked})
        return results
    finally:
        for p in reversed(planted):
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)


def shadow_check(own: Path, tag: str) -> dict[str, Any]:
    """A `sqlite3.py` planted in a worktree is not imported by a process started the way pilothouse
    starts its dispatches and its supervisor (python_argv, host_env), with the worktree as cwd."""
    marker = own.parent / f"{tag}-shadow-ran"
    module = own / "sqlite3.py"
    module.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    try:
        env = host_env({**os.environ, "PYTHONPATH": str(own)})
        try:
            rc: int | None = subprocess.run(python_argv("-c", "import sqlite3"), cwd=own, env=env,
                                            capture_output=True, timeout=120, stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            rc = None
        ran = marker.exists()
        return {"check": "a module planted in the worktree is not imported by pilothouse", "path": str(module),
                "expect": "not imported", "child": "imported" if ran else f"exit {rc}",
                "reached_host": ran, "pass": not ran and rc == 0}
    finally:
        module.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)


def package_check(own: Path, tag: str) -> dict[str, Any]:
    """A `pilothouse/` package planted in a worktree is not run by the commands pilothouse starts
    itself (python_argv: dispatches, the supervisor, the cockpit's server) nor by the one it
    registers with a host agent (mcp_hosts.server_command), which the host starts in the repository:
    plain `python -m pilothouse` would import the planted package before pilothouse's own code ran."""
    from pilothouse.providers.mcp_hosts import server_command

    marker = own.parent / f"{tag}-package-ran"
    package = own / "pilothouse"
    package.mkdir(exist_ok=True)
    for name in ("__init__.py", "__main__.py"):
        (package / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    codes: list[int | None] = []
    try:
        for argv in (python_argv("-m", "pilothouse", "--version"), [*server_command()[:-1], "--version"]):
            try:
                codes.append(subprocess.run(argv, cwd=own, env=host_env(), capture_output=True, timeout=120,
                                            stdin=subprocess.DEVNULL).returncode)
            except subprocess.TimeoutExpired:
                codes.append(None)
        ran = marker.exists()
        return {"check": "a pilothouse/ package planted in the worktree is not run by pilothouse or its MCP "
                         "registration", "path": str(package), "expect": "not imported",
                "child": "imported" if ran else ", ".join(f"exit {c}" for c in codes),
                "reached_host": ran, "pass": not ran and codes == [0, 0]}
    finally:
        for name in ("__init__.py", "__main__.py"):
            (package / name).unlink(missing_ok=True)
        if package.exists() and not any(package.iterdir()):
            package.rmdir()
        marker.unlink(missing_ok=True)
