"""Is bubblewrap here and does it work: its path, a cached smoke test, the install fix.

The lowest part of confinement: the mount plan (mounts.py), the probe (probe.py) and the policy
(policy.py) all ask it; it asks none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from pilothouse.providers import paths

WRITER_MODES = frozenset({"code", "resume", "test"})


INSTALL_FIX = "install the Debian package `bubblewrap` (sudo apt-get install bubblewrap)"


_warned: set[str] = set()


def bwrap_path() -> str | None:
    override = os.environ.get("PILOTHOUSE_BWRAP")  # lets the tests (and packagers) point elsewhere
    if override:
        return override if os.access(override, os.X_OK) else None
    return shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None)


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def namespace_fix() -> str:
    """The sysctl that blocks user namespaces here, with the command that lifts it."""
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        return "user namespaces are disabled: sudo sysctl -w kernel.unprivileged_userns_clone=1"
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        return "user namespaces are disabled: sudo sysctl -w user.max_user_namespaces=15000"
    if _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
        return ("AppArmor restricts user namespaces: sudo sysctl -w "
                "kernel.apparmor_restrict_unprivileged_userns=0 (or add an AppArmor profile for bwrap)")
    return ("user namespaces may be disabled: check sysctl kernel.unprivileged_userns_clone=1 and "
            "user.max_user_namespaces > 0")


@lru_cache(maxsize=8)
def _smoke(bwrap: str, stamp: tuple[int, int]) -> tuple[bool, str, str | None, bool]:
    """(works, reason, version, supports --disable-userns) for this bwrap binary (cached per stat)."""
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        version = out.stdout.strip().split()[-1] if out.stdout.strip() else None
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
        disable_userns = "--disable-userns" in (helptext.stdout + helptext.stderr)
        trial = subprocess.run(
            [bwrap, "--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "--", "/bin/sh", "-c", "exit 0"],
            capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap at {bwrap} cannot run ({exc}); {INSTALL_FIX}", None, False
    if trial.returncode != 0:
        err = (trial.stderr.strip().splitlines() or ["no message"])[-1]
        return False, f"bwrap cannot create a sandbox here ({err}); {namespace_fix()}", version, disable_userns
    return True, "", version, disable_userns


def _probe_bwrap() -> tuple[bool, str, str | None, bool]:
    bwrap = bwrap_path()
    if bwrap is None:
        return False, f"bubblewrap (bwrap) is not installed: {INSTALL_FIX}", None, False
    try:
        st = os.stat(bwrap)
    except OSError as exc:
        return False, f"bwrap at {bwrap} is unreadable ({exc}); {INSTALL_FIX}", None, False
    stamp = (st.st_mtime_ns, st.st_size)
    # a passed probe of this very binary (same path, mtime and size) already proved it works here:
    # trust it and save each dispatch three bwrap start-ups (~20 ms)
    record = _load_json(paths.config_dir() / "probe.json")  # probe.record_path(), without its imports
    known = (record or {}).get("bwrap") or {}
    if (record and record.get("schema") == 1 and record.get("ok") and known.get("path") == bwrap
            and known.get("stat") == list(stamp)):
        return True, "", known.get("version"), bool(known.get("disable_userns"))
    return _smoke_cached(bwrap, stamp)


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _smoke_key(bwrap: str, stamp: tuple[int, int]) -> list[Any]:
    """What a passed smoke test depends on: this binary, this kernel, the user-namespace sysctls."""
    return [bwrap, *stamp, os.uname().release, _read_int("/proc/sys/kernel/unprivileged_userns_clone"),
            _read_int("/proc/sys/user/max_user_namespaces"),
            _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")]


@lru_cache(maxsize=8)
def _smoke_cached(bwrap: str, stamp: tuple[int, int]) -> tuple[bool, str, str | None, bool]:
    """_smoke(), remembered on disk while its key holds: every dispatch re-ran its three bwrap
    start-ups (~50 ms) before. Only a pass is kept: a failure is re-tested (and re-explained)
    each time, so fixing the sysctl takes effect at once."""
    where = paths.cache_dir() / "bwrap-check.json"
    key = _smoke_key(bwrap, stamp)
    known = _load_json(where)
    if known and known.get("key") == key:
        return True, "", known.get("version"), bool(known.get("disable_userns"))
    result = _smoke(bwrap, stamp)
    if result[0]:
        from pilothouse.providers.fsutil import atomic_write_json

        try:
            atomic_write_json(where, {"key": key, "version": result[2], "disable_userns": result[3]})
        except OSError:
            pass  # a read-only cache only costs the next dispatch the check again
    return result


def available() -> tuple[bool, str]:
    """(True, "") when bwrap can build a sandbox here; else (False, the exact reason and fix)."""
    ok, reason, _version, _du = _probe_bwrap()
    return ok, reason


def bwrap_version() -> str | None:
    return _probe_bwrap()[2]


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"pilothouse: warning: {message}", file=sys.stderr)
