"""The functional confinement probe: prove the sandbox holds before trusting it.

In a throwaway git repository with two worktrees, a confined process launched through the real
launch path (confine.wrap around a small Python writer) tries to write into its own worktree
(must succeed) and into the other worktree, the main checkout, the real $HOME and the host's /tmp
(must not reach the host: each write fails, or lands in the sandbox's private /tmp); then to read
a key, $HOME and the main checkout's untracked files by every route (probe_reads.py), and a module
planted in the worktree must not be imported by a process started as pilothouse starts its own;
then links and a FIFO it plants in its own run folder must not make the host's next steps write
outside it or hang (probe_files.py). With
--runner, the runner's own binary must also start confined. The result, with bwrap's version and
the sha256 of bwrap (and of each probed binary), goes to config_dir()/probe.json; a launch whose
bwrap or runner binary no longer matches the record probes again first.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.fsutil import atomic_write_json
from pilothouse.providers.runners.base import LaunchSpec, RunSpec, Sandbox

SCHEMA = 1

# Runs inside the sandbox: tries each write, reports "ok" or the errno name, never raises.
WRITER = r"""
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as fh:
            fh.write("probe\n")
        out[path] = "ok"
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""


def record_path() -> Path:
    return paths.config_dir() / "probe.json"


def load_record() -> dict[str, Any] | None:
    try:
        data = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bwrap_fingerprint() -> dict[str, Any]:
    from pilothouse.providers.confine import bwrap

    path = bwrap.bwrap_path()
    if path is None:
        return {"path": None, "version": None, "sha256": None}
    st = os.stat(path)
    ok, _reason, version, disable_userns = bwrap._smoke(path, (st.st_mtime_ns, st.st_size))
    return {"path": path, "version": version, "sha256": file_sha256(path),
            "stat": [st.st_mtime_ns, st.st_size], "disable_userns": disable_userns}


def record_matches_bwrap(record: dict[str, Any]) -> bool:
    from pilothouse.providers.confine import bwrap

    path = bwrap.bwrap_path()
    if path is None:
        return False
    return (record.get("bwrap") or {}).get("sha256") == file_sha256(path)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=pilothouse probe", "-c", "user.email=probe@pilothouse.invalid",
                    "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null", *args],
                   cwd=cwd, check=True, capture_output=True, text=True, timeout=30)


def _visible_dir() -> Path | None:
    """A fresh directory outside every hidden tree and /tmp, or None. Operators keep checkouts in
    such places (/srv, /work): a main checkout there shows that the mount plan itself hides it."""
    try:
        made = Path(tempfile.mkdtemp(prefix="pilothouse-probe-", dir="/var/tmp"))
    except OSError:
        return None
    from pilothouse.providers.confine.mounts import hidden_roots
    from pilothouse.providers.confine.repoview import real, within

    if any(within(real(made), h) for h in hidden_roots()):
        made.rmdir()
        return None
    return made


def _throwaway_repo(base: Path, main_base: Path | None = None) -> tuple[Path, Path, Path]:
    """(main checkout, own worktree, other worktree) of a fresh one-commit repository."""
    main = (main_base or base) / "repo"
    main.mkdir()
    (main / "README.md").write_text("probe\n")
    _git(main, "init", "-q")
    _git(main, "add", "-A")
    _git(main, "commit", "-qm", "probe")
    own, other = base / "worktrees" / "own", base / "worktrees" / "other"
    _git(main, "worktree", "add", "-q", "-b", "probe-own", str(own))
    _git(main, "worktree", "add", "-q", "-b", "probe-other", str(other))
    return main, own, other


def probe_spec(base: Path, workdir: Path, mode: str = "code") -> RunSpec:
    """A RunSpec with a real sandbox layout under `base` (what dispatch would hand to confine)."""
    root = base / "sandbox"
    sb = Sandbox(root=root, home=root / "home", config=root / "config", data=root / "data",
                 state=root / "state", cache=root / "cache", shared_cache=base / "shared-cache")
    for p in (sb.home, sb.config, sb.data, sb.state, sb.cache, sb.shared_cache):
        p.mkdir(parents=True, exist_ok=True)
    task = root / "task.md"
    task.write_text("probe\n")
    return RunSpec(run_id="probe", provider=SimpleNamespace(key="probe"), mode=mode, model="probe",
                   base_url="", workdir=workdir, sandbox=sb, task_text="probe", task_file=task,
                   step_cap=1, timeout_s=30, idle_timeout_s=30)


def _child_env(spec: RunSpec) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(spec.sandbox.home),
            "LANG": "C.UTF-8"}


def run_writer(spec: RunSpec, targets: list[Path], timeout: float = 30) -> dict[str, str]:
    """Launch the Python writer confined for `spec` (the real wrap) and return path -> outcome."""
    from pilothouse.providers.confine.probe_reads import run_inside

    return run_inside(spec, WRITER, [str(t) for t in targets], _child_env(spec), timeout)


def _checks(base: Path) -> list[dict[str, Any]]:
    visible = _visible_dir()
    try:
        return _checks_in(base, visible)
    finally:
        if visible is not None:
            shutil.rmtree(visible, ignore_errors=True)


def _checks_in(base: Path, visible: Path | None) -> list[dict[str, Any]]:
    from pilothouse.providers.confine import probe_reads

    main, own, other = _throwaway_repo(base, visible)
    spec = probe_spec(base, own)
    tag = f"pilothouse-probe-{os.getpid()}-{int(time.time() * 1000)}"
    home = Path(os.path.realpath(Path.home()))
    host_tmp = Path(tempfile.gettempdir()) / f"{tag}.tmp"
    cases = [
        ("own worktree", own / f"{tag}.txt", True),
        ("other worktree", other / f"{tag}.txt", False),
        ("main checkout", main / f"{tag}.txt", False),
        ("main checkout .git", main / ".git" / f"{tag}.txt", False),
        ("own worktree .git", own / ".git", False),
        ("$HOME", home / f"{tag}.txt", False),
        ("/tmp outside its own", host_tmp, False),
    ]
    before_git = (own / ".git").read_text()
    try:
        outcome = run_writer(spec, [path for _n, path, _e in cases])
        results = []
        for name, path, expect_ok in cases:
            child = outcome.get(str(path), "not attempted")
            if name == "own worktree .git":
                on_host = (own / ".git").read_text() != before_git
            else:
                on_host = path.exists()
            passed = (child == "ok" and on_host) if expect_ok else not on_host
            results.append({"check": name, "path": str(path), "expect": "write" if expect_ok else "blocked",
                            "child": child, "reached_host": on_host, "pass": passed})
        # explore/review get no writable worktree at all
        ro_spec = probe_spec(base / "ro", own, mode="explore")
        target = own / f"{tag}-explore.txt"
        child = run_writer(ro_spec, [target]).get(str(target), "not attempted")
        results.append({"check": "explore mode: own worktree", "path": str(target), "expect": "blocked",
                        "child": child, "reached_host": target.exists(), "pass": not target.exists()})
        results += probe_reads.read_checks(spec, main, own, tag, _child_env(spec))
        from pilothouse.providers.confine import probe_files

        files = probe_spec(base / "files", own)
        results += probe_files.file_checks(files, base / "files", _child_env(files))
        results.append(probe_reads.shadow_check(own, tag))
        results.append(probe_reads.package_check(own, tag))
        return results
    finally:
        for p in (home / f"{tag}.txt", host_tmp):
            if p.exists():  # only if the sandbox failed; never leave probe litter in the user's places
                p.unlink()


def binary_check(binary: str, base: Path) -> dict[str, Any]:
    """The runner's own binary starts under confinement (`BINARY --version` exits 0)."""
    from pilothouse.providers.confine import mounts

    resolved = os.path.realpath(shutil.which(binary) or binary)
    workdir = base / "binary-wt"
    workdir.mkdir(parents=True, exist_ok=True)
    spec = probe_spec(base / "binary", workdir)
    launch = LaunchSpec(argv=[resolved, "--version"], env=_child_env(spec), cwd=workdir)
    wrapped = mounts.wrap(launch, spec)
    try:
        proc = subprocess.run(wrapped.argv, env=wrapped.env, cwd=workdir, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, start_new_session=True)
        rc, out = proc.returncode, (proc.stdout + proc.stderr).strip()
    except subprocess.TimeoutExpired:
        rc, out = -1, "timed out"
    st = os.stat(resolved)
    return {"binary": resolved, "sha256": file_sha256(resolved), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "exit_code": rc, "output": out.splitlines()[0][:200] if out else "", "pass": rc == 0}


def runner_binary(name: str) -> str:
    """The executable a runner launches (UserError when the runner or its binary is missing)."""
    from pilothouse.providers.runners import get_runner  # type: ignore[attr-defined]

    runner = get_runner(name)
    for attr in ("binary_path", "binary", "executable"):
        value = getattr(runner, attr, None)
        value = value() if callable(value) else value
        if value:
            return str(value)
    if name == "builtin":
        return sys.executable
    found = shutil.which(name)
    if not found or not runner.installed():
        raise UserError(f"runner '{name}' is not installed; run `pilothouse install runner {name}`")
    return found


def run_probe(runner: str | None = None) -> dict[str, Any]:
    """Run the checks now, write probe.json, return the record."""
    from pilothouse.providers.confine import bwrap

    ok, reason = bwrap.available()
    record: dict[str, Any] = {"schema": SCHEMA, "time": datetime.now(UTC).isoformat(timespec="seconds"),
                              "bwrap": bwrap_fingerprint(), "ok": False, "reason": reason, "results": [],
                              "binaries": dict((load_record() or {}).get("binaries") or {})}
    if ok:
        # under pilothouse's cache (a hidden tree, like the real worktrees), not /tmp: inside the
        # sandbox /tmp is a private writable tmpfs, which would turn blocked writes into silent ones
        where = paths.cache_dir()
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="probe-", dir=where) as tmp:
            base = Path(tmp)
            record["results"] = _checks(base)
            if runner:
                check = binary_check(runner_binary(runner), base)
                check["runner"] = runner
                record["binaries"][check["binary"]] = check
                record["results"].append({"check": f"runner {runner} starts confined", "path": check["binary"],
                                          "expect": "exit 0", "child": f"exit {check['exit_code']}",
                                          "reached_host": False, "pass": check["pass"]})
        failed = [r["check"] for r in record["results"] if not r["pass"]]
        record["ok"] = not failed
        record["reason"] = f"confinement failed: {', '.join(failed)}" if failed else ""
    atomic_write_json(record_path(), record)  # makes the config dir as needed
    return record


def _binary_changed(record: dict[str, Any], binary: str) -> bool:
    entry = (record.get("binaries") or {}).get(binary)
    if entry is None:
        return False  # never probed with --runner: the bwrap probe covers it
    if not entry.get("pass"):
        return True  # it failed last time: check again rather than refuse forever
    try:
        st = os.stat(binary)
    except OSError:
        return True
    if (st.st_size, st.st_mtime_ns) == (entry.get("size"), entry.get("mtime_ns")):
        return False
    return file_sha256(binary) != entry.get("sha256")


def ensure_probed(binary: str | None = None) -> dict[str, Any]:
    """The current record, probing first when missing, failed, or bwrap/the binary changed."""
    record = load_record()
    binary = os.path.realpath(binary) if binary else None
    if record and record.get("ok") and record_matches_bwrap(record) and not (
            binary and _binary_changed(record, binary)):
        return record
    lock_path = paths.config_dir() / ".probe.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel dispatches wait for one probe, not run many
        record = load_record()
        if not (record and record.get("ok") and record_matches_bwrap(record)):
            record = run_probe()
        if binary and _binary_changed(record, binary) and record.get("ok"):
            with tempfile.TemporaryDirectory(prefix="pilothouse-probe-") as tmp:
                check = binary_check(binary, Path(tmp))
            record["binaries"][binary] = check
            record["ok"] = bool(check["pass"])
            if not check["pass"]:
                record["reason"] = f"{binary} does not start confined: {check['output']}"
            atomic_write_json(record_path(), record)
    if not record.get("ok"):
        raise UserError(f"refusing to launch a writer: {record.get('reason') or 'confinement probe failed'}; "
                        "see `pilothouse probe`")
    return record
