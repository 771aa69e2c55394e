"""Agent CLIs installed from the npm registry: finding, versioning, installing, removing them.

Lookup order for a runner's binary: the user's prefix (paths.runners_dir(), where `pilothouse
install runner` puts it), then $PILOTHOUSE_TEST_RUNNERS (the prefix scripts/test fills), then
PATH. Versions are cached by the binary's mtime and size, so `status` and dispatch never spawn
`--version` twice for the same file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import Runner, RunSpec
from pilothouse.providers.runners.pins import Pin, pin

_VERSION = re.compile(r"\d+\.\d+\.\d+[\w.-]*")
# What every CLI child may inherit from our environment; the rest is set from the sandbox.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def prefixes() -> list[Path]:
    out = [paths.runners_dir()]
    test_prefix = os.environ.get("PILOTHOUSE_TEST_RUNNERS")
    if test_prefix:
        out.append(Path(test_prefix))
    return out


def find_binary(runner: str) -> Path | None:
    p = pin(runner)
    for prefix in prefixes():
        cand = prefix / "node_modules" / ".bin" / p.binary
        if cand.exists():
            return cand
    found = shutil.which(p.binary)
    return Path(found) if found else None


def _versions_file() -> Path:
    return paths.cache_dir() / "runner-versions.json"


def version_of(binary: Path, timeout: float = 20.0) -> str | None:
    """The binary's version, from the cache while its mtime and size are unchanged."""
    try:
        real = binary.resolve()
        st = real.stat()
    except OSError:
        return None
    stamp = [st.st_mtime_ns, st.st_size]
    cache_path = _versions_file()
    try:
        cache: dict[str, Any] = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(str(real))
    if isinstance(hit, dict) and hit.get("stamp") == stamp:
        return hit.get("version")
    version = _package_version(real) or _run_version(binary, timeout)
    if version is not None:
        from pilothouse.providers.fsutil import atomic_write_json

        cache[str(real)] = {"stamp": stamp, "version": version}
        try:
            atomic_write_json(cache_path, cache, mode=0o600)
        except OSError:
            pass  # a read-only cache only costs the next caller a spawn
    return version


def _package_version(real: Path) -> str | None:
    """An npm-installed CLI names its version in the package.json next to its bin/."""
    for parent in list(real.parents)[:3]:
        pkg = parent / "package.json"
        if pkg.is_file():
            try:
                data = json.loads(pkg.read_text())
            except (OSError, ValueError):
                return None
            v = data.get("version") if isinstance(data, dict) else None
            return v if isinstance(v, str) else None
    return None


def _run_version(binary: Path, timeout: float) -> str | None:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(out.stdout or out.stderr or "")
    return m.group(0) if m else None


# --- install / uninstall -----------------------------------------------------------------------

def _record_file() -> Path:
    return paths.runners_dir() / "installed.json"


def installed_records() -> dict[str, Any]:
    try:
        data = json.loads(_record_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise UserError("npm is not installed; install Node.js 20 or newer with npm "
                        "(Debian/Ubuntu: `apt-get install nodejs npm`) and run the command again")
    return npm


def _npm_run(args: list[str], what: str) -> None:
    prefix = paths.runners_dir()
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run([_npm(), *args, "--prefix", str(prefix), "--no-audit", "--no-fund",
                               "--loglevel=error"], capture_output=True, text=True, timeout=900,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} took more than 15 minutes; check the network to the npm registry "
                        "and try again") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        # npm ends with "A complete log of this run…"; the first real error line says what went wrong
        useful = [ln for ln in lines if ("npm error" in ln or "ERR!" in ln) and "complete log" not in ln
                  and not re.match(r"npm (error|ERR!) code\b", ln)]
        why = (useful or lines or [f"npm exited with code {proc.returncode}"])[0]
        raise UserError(f"{what} failed: {why[:240]}")


def install(runner: str) -> dict[str, Any]:
    """Install the pinned CLI into the user's prefix and record it; returns the record."""
    from pilothouse.providers.fsutil import atomic_write_json

    p = pin(runner)
    _npm_run(["install", p.spec], f"npm install {p.spec}")
    binary = paths.runners_dir() / "node_modules" / ".bin" / p.binary
    version = version_of(binary) if binary.exists() else None
    if version is None:
        raise UserError(f"npm installed {p.spec} but {binary} does not run on this machine; "
                        f"check `{binary} --version`")
    records = installed_records()
    records[runner] = {"package": p.package, "version": version, "binary": str(binary),
                       "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_json(_record_file(), records)
    return records[runner]


def uninstall(runner: str) -> bool:
    """Remove the CLI from the user's prefix; False when it was not installed there."""
    from pilothouse.providers.fsutil import atomic_write_json

    p = pin(runner)
    records = installed_records()
    present = (paths.runners_dir() / "node_modules" / p.package).exists()
    if not present and runner not in records:
        return False
    if present:
        _npm_run(["uninstall", p.package], f"npm uninstall {p.package}")
    records.pop(runner, None)
    atomic_write_json(_record_file(), records)
    return True


# --- the base of the three CLI runners ------------------------------------------------------------

class NpmRunner(Runner):
    """A runner whose program is an npm-installed agent CLI."""

    @property
    def pin(self) -> Pin:
        return pin(self.name)

    def binary(self) -> Path | None:
        return find_binary(self.name)

    def require_binary(self) -> Path:
        b = self.binary()
        if b is None:
            raise UserError(f"the {self.name} CLI is not installed; run `pilothouse install runner {self.name}`")
        return b

    def installed(self) -> bool:
        return self.binary() is not None

    def version(self) -> str | None:
        b = self.binary()
        return version_of(b) if b is not None else None

    def base_env(self, spec: RunSpec) -> dict[str, str]:
        """The allow-listed environment with HOME and XDG_* pointing into the run's sandbox."""
        sb = spec.sandbox
        env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update({"HOME": str(sb.home), "XDG_CONFIG_HOME": str(sb.config), "XDG_DATA_HOME": str(sb.data),
                    "XDG_STATE_HOME": str(sb.state), "XDG_CACHE_HOME": str(sb.cache),
                    "TERM": "dumb", "NO_COLOR": "1", "CI": "1"})
        return env

    def prompt(self, spec: RunSpec) -> bytes:
        """The first user message (mode preamble + task) dispatch wrote to the sandbox's task file."""
        try:
            return spec.task_file.read_bytes()
        except OSError:
            return spec.task_text.encode()

    def install_root(self) -> list[Path]:
        """Read-only paths the confined child needs: the prefix holding the CLI."""
        b = self.binary()
        if b is None:
            return []
        if b.parent.name == ".bin":
            return [b.parent.parent]  # the whole node_modules: the CLI loads its siblings
        return [b.resolve().parent]
