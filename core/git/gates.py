"""Gates: the project's check commands (`gates:` in .ai/project.yaml), run in a worktree.

A gate passes when its command exists, finishes within the timeout, exits 0 and leaves the
tree as it found it. A gate that edits tracked files or leaves new files behind fails (a check
that "fixes" code would approve work nobody reviewed), and what it changed is put back.

A gate runs worker-written code (the tests, a conftest.py is enough), so it is confined like a
worker (providers/confine.prepare_command): it may write the checkout it runs in, a private /tmp
and its own throwaway HOME/cache, nothing else; the operator's home, checkout, other worktrees
and pilothouse's data stay out of reach, and secret-looking variables are not passed on. Only
`confinement: off` in the project runs it on the host as is. The commands come from the
ProjectConfig the caller loaded from the main checkout (load_project), never from the worktree,
whose .ai/project.yaml its worker can rewrite.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.core.git.toolchain import describe, missing_program
from pilothouse.core.git.worktrees import git, is_scratch, some_paths
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers import confine, paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.workerfs import read_in_tree

DEFAULT_TIMEOUT_S = 1800.0
# what the gate's before/after snapshot hashes of one changed file (and its size): beyond it, a
# change that keeps the size goes unseen, a bounded cost for a check on a worker's tree
SNAPSHOT_LIMIT = 16 << 20
TAIL_BYTES = 4096
LOG_BYTES = 1 << 20  # the full output kept for the operator (gate_log): its last MB, past that
# not handed to a confined gate: the code it runs is the worker's, and the network is open
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
_HOST_ONLY = ("SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "TMPDIR")


@dataclass
class GateResult:
    level: str
    command: str
    passed: bool
    exit_code: int | None
    output_tail: str
    duration_s: float
    changed_files: list[str] = field(default_factory=list)
    reason: str | None = None  # why it failed, one line; None when passed
    timed_out: bool = False
    # the command's program is not installed: the project's settings are at fault, not the work
    not_installed: bool = False
    # what the gate measured (gate_counts.TestCounts.to_dict()); None when no runner output was read
    counts: dict[str, Any] | None = None
    # the gate run again with the holdout tests (core/git/holdout.py): {passed, counts}, no output
    holdout: dict[str, Any] | None = None
    # the program the command ran and what it is (toolchain.describe): which python, which node
    toolchain: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _snapshot(cwd: Path) -> dict[str, str]:
    """Dirty paths -> content fingerprint (tracked changes and untracked, non-ignored files)."""
    # --no-optional-locks: only look; refreshing (rewriting) the index is not the snapshot's business
    # and costs each of the gate's two snapshots a lock and a write
    out = git(cwd, "--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all",
              "--no-renames", strip=False)
    snap: dict[str, str] = {}
    for entry in out.split("\0"):
        if len(entry) < 4:
            continue
        status, path = entry[:2], entry[3:]
        if is_scratch(path):
            continue
        # the worktree is the worker's: a link is hashed by its target text, never followed
        try:
            entry = read_in_tree(cwd, path, SNAPSHOT_LIMIT)
            digest = ("absent" if entry.kind in ("missing", "other") else
                      f"{entry.kind}:{hashlib.sha256(entry.data).hexdigest()}:{entry.size}")
        except (OSError, ValueError):
            digest = "unreadable"
        snap[path] = f"{status}:{digest}"
    return snap


def _snapshot_started(cwd: Path) -> Future[dict[str, str]]:
    """_snapshot(cwd) begun in the background: the git process runs while the sandbox is planned
    instead of before it (both sit on the path from a verdict to its merge, twice per task)."""
    global _snapshots
    if _snapshots is None:
        _snapshots = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gate-snapshot")
    return _snapshots.submit(_snapshot, cwd)


_snapshots: ThreadPoolExecutor | None = None


def _restore(cwd: Path, paths: list[str], before: dict[str, str]) -> None:
    """Put back what the gate changed among paths that were clean before it ran."""
    tracked = set(git(cwd, "ls-files", "-z", "--", *paths).split("\0")) - {""} if paths else set()
    for p in paths:
        if p in before:
            continue  # dirty before the gate: the previous content is not ours to guess
        if p in tracked:
            git(cwd, "-c", "core.hooksPath=/dev/null", "checkout", "-q", "HEAD", "--", p, check=False)
        else:
            from pilothouse.providers import workerfs

            # the worktree is the worker's: removed through the door (no link on the way followed)
            if workerfs.read(cwd, p, 0).kind in ("file", "link", "other"):
                workerfs.remove(cwd, p)
            parent = Path(p).parent
            while str(parent) != "." and workerfs.rmdir(cwd, parent):
                parent = parent.parent


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        # bwrap forwards no signal: a graceful stop must reach the processes inside; killing bwrap
        # itself (its process group) takes the whole sandbox down (--die-with-parent)
        if sig != signal.SIGTERM or not confine.signal_sandbox(proc.pid, sig):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def gate_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # bytecode caches would count as files the gate created in a repo without a .gitignore
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("CI", "1")
    if extra:
        env.update(extra)
    return env


def confined_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """gate_env() without what worker-written code must not get: secrets, host agent sockets,
    pilothouse's own settings (HOME and XDG dirs are replaced by the gate's scratch ones)."""
    env = {k: v for k, v in gate_env().items()
           if not _SECRET_NAME.search(k) and k not in _HOST_ONLY and not k.startswith("PILOTHOUSE_")}
    if extra:
        env.update(extra)  # what the caller passes explicitly is meant for the gate
    return env


def environment_path(cwd: Path, settings: dict[str, Any] | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """PATH (and VIRTUAL_ENV) for a gate: the bin/ of the repository's shared virtualenv first, and
    never pilothouse's own venv (first on the supervisor's PATH after the README's install), so a
    bare `python` or `pytest` in a gate is the project's. {} when the caller set PATH itself."""
    import sys

    if env and "PATH" in env:
        return {}
    own = Path(sys.prefix) / "bin" if sys.prefix != sys.base_prefix else None
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and (own is None or Path(p) != own)]
    out: dict[str, str] = {}
    share = [str(s) for s in (settings or {}).get("sandbox_share") or []]
    for entry in share:
        bin_dir = confine.host_path(cwd, Path(entry) / "bin", share)
        if (bin_dir / "python").is_file():
            parts.insert(0, str(bin_dir))
            out["VIRTUAL_ENV"] = str(bin_dir.parent)
            break
    out["PATH"] = os.pathsep.join(parts)
    return out


def settings_of(project: ProjectConfig) -> dict[str, Any]:
    """The project's confinement settings, as prepare_command() takes them."""
    return {"confinement": project.confinement, "network": project.network, "sandbox_read": project.sandbox.read,
            "sandbox_share": project.sandbox.share}


def _confinement_off(settings: dict[str, Any] | None) -> bool:
    value = (settings or {}).get("confinement")
    return value is False or str(value).strip().lower() in {"off", "false", "no"}


def _confine(argv: list[str], env: dict[str, str] | None, cwd: Path, settings: dict[str, Any] | None,
             level: str) -> tuple[list[str], dict[str, str], bool, Path | None]:
    """(argv, env, confined, scratch dir to remove afterwards) of the command to spawn.

    A gate's HOME and XDG dirs live in its sandbox's private /tmp: made fresh by bwrap, gone with
    the sandbox, nothing to make or clean up on the host — gates are on the path every dependent
    task waits on. That /tmp is memory, though, and a setup command (`npm ci`, `pip install`)
    fills its HOME with package caches: those get a throwaway dir on disk instead."""
    if _confinement_off(settings):
        return argv, gate_env(env), False, None  # the operator accepted the risk: run on the host as is
    scratch = None
    if level.startswith("setup"):
        root = paths.cache_dir() / "gates"
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=re.sub(r"[^\w.-]", "_", level) + "-", dir=root))
    try:
        launch = confine.prepare_command(argv, confined_env(env), cwd, scratch, settings=settings)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return launch.argv, launch.env, True, scratch


def run_command(command: str, cwd: Path | str, *, level: str = "command", timeout: float = DEFAULT_TIMEOUT_S,
                env: dict[str, str] | None = None, check_tree: bool = True,
                on_start: Callable[[int], None] | None = None,
                settings: dict[str, Any] | None = None, log_to: Path | None = None) -> GateResult:
    """Run one shell command as a gate would (also used for `setup:` commands, check_tree=False).

    Confined to `cwd` unless `settings` (the project's, see settings_of) say `confinement: off`.
    `on_start(pgid)` is called once the command runs in its own process group, so a caller that
    may be killed can record it and a successor can end an orphaned gate (`kill_orphan_gate`)."""
    cwd = Path(cwd)
    env = {**(env or {}), **environment_path(cwd, settings, env)}
    full_env = gate_env(env)
    start = time.monotonic()
    setup = level.startswith("setup")
    field, label = ("setup", level) if setup else (f"gates.{level}", f"gate '{level}'")
    missing = missing_program(command, cwd, full_env, settings)
    if missing:
        return GateResult(level, command, False, None, "", 0.0,
                          reason=f"{label}: command not found: {missing} — install it or fix "
                                 f"{field} in .ai/project.yaml", not_installed="/" not in missing)
    toolchain = describe(command, cwd, full_env, settings)
    before = _snapshot_started(cwd) if check_tree else None
    try:
        argv, spawn_env, confined, scratch = _confine(["/bin/sh", "-c", command], env, cwd, settings, level)
    except BaseException as exc:
        if before is not None:
            before.exception()  # not left running behind us; its result (or error) no longer matters
        if not isinstance(exc, UserError):
            raise
        return GateResult(level, command, False, None, "", 0.0, reason=f"{label}: cannot run confined: {exc}")
    try:
        result = _run(command, cwd, argv, spawn_env, level=level, label=label, field=field, timeout=timeout,
                      before=before, on_start=on_start, start=start, log_to=log_to)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    result.toolchain = toolchain
    if confined and result.exit_code == 127 and result.reason and "not found" in result.reason:
        # found on the host but not in the sandbox: most likely installed under the hidden $HOME
        result.reason += " (gates run confined: $HOME and pilothouse's data are not visible to them)"
    return result


def _run(command: str, cwd: Path, argv: list[str], env: dict[str, str], *, level: str, label: str, field: str,
         timeout: float, before: Future[dict[str, str]] | None, on_start: Callable[[int], None] | None,
         start: float, log_to: Path | None = None) -> GateResult:
    """`before`: the pending snapshot of the tree (None: the tree is not checked)."""
    check_tree = before is not None
    before_snap = before.result() if before is not None else {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as junit:
        # The runner writes its JUnit report through an inherited descriptor: no path on the host or
        # in the tree (a report file there would count as a change the gate made); reopening
        # /proc/self/fd/N reaches the host file from inside the sandbox's mount namespace. pytest
        # and jest-junit take it from their own variables (the project's own setting wins for
        # jest-junit); any other reporter is pointed at $PILOTHOUSE_JUNIT_REPORT by the gate command
        # (vitest: --reporter=junit --outputFile.junit=$PILOTHOUSE_JUNIT_REPORT).
        report = f"/dev/fd/{junit.fileno()}"
        env = {**env, "PYTEST_ADDOPTS": f"{env.get('PYTEST_ADDOPTS', '')} --junitxml={report}".strip(),
               "JEST_JUNIT_OUTPUT_FILE": env.get("JEST_JUNIT_OUTPUT_FILE") or report,
               "PILOTHOUSE_JUNIT_REPORT": report}
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, pass_fds=(junit.fileno(),),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _kill_group(proc)

        # a blocking wait plus a timer, not wait(timeout=): that one polls with sleeps of up to 50 ms,
        # which a gate of a few ms (and every merge behind it) would pay
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        try:
            if on_start is not None:
                on_start(proc.pid)
            timer.start()
            proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            timer.cancel()
        timed_out = expired.is_set()
        if timed_out:
            timer.join()  # its kill sequence is over before we judge the tree
        else:
            # the command is done; stray children of it must not outlive the gate
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        from pilothouse.providers.redact import configured_redactor

        # the output is the worker's code talking: a test printing the run's key would put it in the
        # problem, the resume's task and the kept log, none of which events' redaction covers
        redact = configured_redactor().redact
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - TAIL_BYTES))
        tail = redact(out.read().decode("utf-8", errors="replace"))
        if log_to is not None:
            _keep_log(out, size, log_to, redact)
        counts = None if timed_out else _counts(out, size, junit)
    duration = round(time.monotonic() - start, 3)
    code = proc.returncode
    result = GateResult(level, command, False, None if timed_out else code, tail, duration, timed_out=timed_out,
                        counts=counts)
    if check_tree:
        after = _snapshot(cwd)
        changed = sorted(p for p in set(before_snap) | set(after) if before_snap.get(p) != after.get(p))
        result.changed_files = changed
        if changed:
            _restore(cwd, changed, before_snap)
    if timed_out:
        result.reason = f"gate '{level}' timed out after {timeout:g}s (killed)"
    elif code == 127 and "not found" in tail:
        result.reason = f"{label}: command not found (exit 127) — fix {field} in .ai/project.yaml"
    elif code != 0:
        result.reason = f"gate '{level}' failed: exit {code}"
    elif result.changed_files:
        result.reason = f"gate '{level}' changed files ({some_paths(result.changed_files)}); a gate must not edit the tree (restored)"
    else:
        result.passed = True
    return result


def _counts(out: Any, size: int, junit: Any) -> dict[str, Any] | None:
    """The gate's test counts from its JUnit report or its output (both bounded: worker-written)."""
    from pilothouse.core.git.gate_counts import MAX_REPORT_BYTES, counts_of

    out.seek(max(0, size - MAX_REPORT_BYTES))
    text = out.read().decode("utf-8", errors="replace")
    report = junit.read(MAX_REPORT_BYTES + 1)
    found = counts_of(text, report if len(report) <= MAX_REPORT_BYTES else None)
    return found.to_dict() if found is not None else None


def gate_log(runtime: Path, job: str, task: str, level: str) -> Path:
    """Where a task's last run of gate `level` keeps its whole output (the event has its tail)."""
    def safe(name: str) -> str:
        return re.sub(r"[^\w.-]", "_", name).lstrip(".") or "_"

    return runtime / "gates" / safe(job) / f"{safe(task)}.{safe(level)}.log"


def _keep_log(out: Any, size: int, log_to: Path, redact: Callable[[str], str]) -> None:
    from pilothouse.providers.fsutil import atomic_write_bytes

    out.seek(max(0, size - LOG_BYTES))
    try:
        log_to.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(log_to, redact(out.read().decode("utf-8", errors="replace")).encode(), durable=False)
    except OSError:
        pass  # the tail in the event still says what failed; a full disk must not fail the gate


def run_gate(project: ProjectConfig, level: str, cwd: Path | str, timeout: float = DEFAULT_TIMEOUT_S, *,
             env: dict[str, str] | None = None, on_start: Callable[[int], None] | None = None,
             log_to: Path | None = None) -> GateResult:
    """Run gate `level` of the project in `cwd`; `log_to`: where its whole output is kept."""
    command = project.gates.get(level)
    if command is None:
        known = ", ".join(sorted(project.gates))
        return GateResult(level, "", False, None, "", 0.0,
                          reason=f"gate '{level}' is not defined in .ai/project.yaml (defined: {known})")
    res = run_command(command, cwd, level=level, timeout=timeout, env=env, on_start=on_start,
                      settings=settings_of(project), log_to=log_to)
    if res.passed and project.holdout:
        from pilothouse.core.git.holdout import run_holdout

        res = run_holdout(project, level, Path(cwd), res, lambda: run_command(
            command, cwd, level=level, timeout=timeout, env=env, on_start=on_start, settings=settings_of(project)))
    return res


def kill_orphan_gate(pgid: int, cwd: Path | str) -> bool:
    """End a gate left running by a killed supervisor: its process group, but only if that group's
    leader still runs in `cwd` (a recycled pid belongs to someone else). True when one was killed."""
    try:
        leader_cwd = os.readlink(f"/proc/{pgid}/cwd")
        if Path(leader_cwd).resolve() != Path(cwd).resolve() or os.getpgid(pgid) != pgid:
            return False
        os.killpg(pgid, signal.SIGKILL)
    except (OSError, ValueError):
        return False
    return True


def run_setup(project: ProjectConfig, cwd: Path | str, timeout: float = DEFAULT_TIMEOUT_S, *,
              env: dict[str, str] | None = None) -> GateResult | None:
    """Run the project's `setup:` commands in a fresh worktree; the first failure, or None when all pass."""
    for i, step in enumerate(project.setup):
        command = step if isinstance(step, str) else step.run

        def run(command: str = command, i: int = i) -> GateResult:
            return run_command(command, cwd, level=f"setup[{i}]", timeout=timeout, env=env, check_tree=False,
                               settings=settings_of(project))

        if isinstance(step, str) or step.cache is None:
            res = run()
        else:
            from pilothouse.core.git.setup_cache import run_cached

            res = run_cached(step, Path(cwd), run, lambda passed, tail, took, command=command, i=i: GateResult(
                f"setup[{i}]", command, passed, 0, tail, took))
        if not res.passed:
            return res
    return None
