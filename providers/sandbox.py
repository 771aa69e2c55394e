"""Per-run sandboxes and run logs.

providers_dir()/<key>/runs/<run_id>/{home,config,data,state,cache} is the worker's whole world:
its HOME and XDG dirs, its session, its config. providers_dir()/<key>/cache is shared by the
provider's runs (package caches, model metadata). A resumed run reuses the original run's
sandbox (the new run id is a symlink to it), so the agent finds its own session files.

The credential: with the file key backend the sandbox holds a symlink to the 0600 key file
(nothing is copied; the key exists once on disk). With the keyring backend there is no file to
point at, so a 0600 file is written into the sandbox at spawn and removed when the run ends
(dispatch calls `drop_credential`).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import Sandbox

SUBDIRS = ("home", "config", "data", "state", "cache")


def ensure_private_dir(path: Path) -> Path:
    # same as fsutil.ensure_private_dir; fsutil imports tempfile (~5 ms) that dispatch does not need
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Atomic 0600 write (temp name + rename): readers never see half a verdict or report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(3).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
CREDENTIAL = "credential"
LOCK = "run.lock"


def new_run_id() -> str:
    # os.urandom, not `secrets`: that module costs ~9 ms of imports (hmac, hashlib) on this path
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(4).hex()


def valid_run_id(run_id: str) -> bool:
    return bool(run_id) and len(run_id) <= 80 and all(c.isalnum() or c in "-_." for c in run_id) \
        and not run_id.startswith(".")


def runs_dir(key: str) -> Path:
    return paths.providers_dir() / key / "runs"


def _sandbox_at(key: str, root: Path) -> Sandbox:
    shared = ensure_private_dir(paths.providers_dir() / key / "cache")
    sb = Sandbox(root=root, home=root / "home", config=root / "config", data=root / "data",
                 state=root / "state", cache=root / "cache", shared_cache=shared)
    cred = root / CREDENTIAL
    if cred.is_symlink() or cred.exists():
        sb.credential = cred
    return sb


def make_sandbox(key: str, run_id: str, resume_of: str | None = None) -> Sandbox:
    """A fresh sandbox, or for a resume the original run's sandbox reached through the new id."""
    if not valid_run_id(run_id):
        raise UserError(f"run id '{run_id}' is not valid; use letters, digits, '-', '_' or '.'")
    base = ensure_private_dir(runs_dir(key))
    link = base / run_id
    if link.exists() or link.is_symlink():
        raise UserError(f"run id '{run_id}' already exists for provider '{key}'; pick a new --run-id")
    if resume_of:
        original = base / resume_of
        if not original.exists():
            raise UserError(f"run '{resume_of}' has no sandbox under {base} (pruned by `maintain runs`?); "
                            "start a new run instead")
        root = original.resolve()
        os.symlink(root, link)
    else:
        root = ensure_private_dir(link)
    from pilothouse.providers import workerfs

    for sub in SUBDIRS:
        # the worker's HOME and XDG dirs: a resume finds them as the last worker left them, so
        # each is claimed through the door (a link there is replaced, never chmod'ed through)
        workerfs.make_dir(root, sub)
    return _sandbox_at(key, root)


def find_run(run_id: str) -> tuple[str, Path] | None:
    """(provider key, sandbox root) of a run, searching every provider."""
    base = paths.providers_dir()
    if not valid_run_id(run_id) or not base.is_dir():
        return None
    for prov in sorted(base.iterdir()):
        cand = prov / "runs" / run_id
        if cand.exists():
            return prov.name, cand
    return None


# --- credential -----------------------------------------------------------------------------

def link_credential(sb: Sandbox, key_file: Path | None, value: str | None) -> Path | None:
    """Make the key readable inside the sandbox; see the module docstring for which way and why."""
    cred = sb.root / CREDENTIAL
    drop_credential(sb)
    if key_file is not None and key_file.exists():
        os.symlink(key_file, cred)
    elif value:
        fd = os.open(cred, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
    else:
        sb.credential = None
        return None
    sb.credential = cred
    return cred


def drop_credential(sb: Sandbox) -> None:
    cred = sb.root / CREDENTIAL
    if cred.is_symlink() or cred.exists():
        cred.unlink()


# --- the run lock: pid + process start time (a recycled pid is not mistaken for a live run) ---

def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def lock_holder(root: Path) -> int | None:
    try:
        pid_s, start = (root / LOCK).read_text().split()[:2]
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    return pid if _start_time(pid) == start else None


def acquire_lock(root: Path) -> None:
    holder = lock_holder(root)
    if holder is not None and holder != os.getpid():
        raise UserError(f"sandbox {root} is in use by a running dispatch (pid {holder}); wait for it "
                        "or abort it first")
    tmp = root / f".{LOCK}.{os.getpid()}"
    tmp.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    os.replace(tmp, root / LOCK)


def release_lock(root: Path) -> None:
    if lock_holder(root) == os.getpid():
        (root / LOCK).unlink(missing_ok=True)


# --- log paths --------------------------------------------------------------------------------

class RunLogs:
    def __init__(self, key: str, run_id: str) -> None:
        self.dir = ensure_private_dir(paths.logs_dir() / key)
        self.jsonl = self.dir / f"{run_id}.jsonl"
        self.stderr = self.dir / f"{run_id}.stderr.log"
        self.report = self.dir / f"{run_id}.report.md"
        self.verdict = self.dir / f"{run_id}.verdict.json"
        self.latest = paths.logs_dir() / "latest.log"


def latest_line(text: str) -> None:
    """Append one human line to logs_dir()/latest.log (one write: lines from parallel runs stay whole)."""
    path = paths.logs_dir() / "latest.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    line = time.strftime("%H:%M:%S ") + text.replace("\n", " ").rstrip() + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)
