"""Confinement of worker processes with bubblewrap.

A worker that edits code is a program we did not write, driven by a model we do not control; the
agent CLIs' own permission rules guard against mistakes, not against a model that tries. So every
launch goes through prepare(), which wraps the runner's argv in `bwrap`:

- the whole filesystem read-only; a private /tmp; a fresh minimal /proc (own pid namespace, so no
  other process's environ is readable) and /dev;
- the user's home, pilothouse's own config/data/state/cache dirs (other runs' sandboxes, other
  worktrees, logs, the file key store) and XDG_RUNTIME_DIR (keyring / D-Bus sockets) hidden under
  empty read-only tmpfs; only what the runner needs is bound back in, read-only (its interpreter,
  its installed CLI, the run's credential);
- read-write: the run's own sandbox dirs (its HOME/XDG dirs; the sandbox's own records stay
  read-only), the provider's shared cache, the runner's declared writable paths and — for
  code/resume/test only — the worktree. Inside it, `.git` (no planted hooks, no repointing for git
  commands run later outside), `.ai/project.yaml` and `.ai/runtime` stay read-only;
- a user namespace with every capability dropped even when pilothouse runs as root (root keeps
  CAP_SYS_ADMIN under bwrap otherwise and could simply remount / read-write), no nested user
  namespaces, its own pid/ipc/uts namespaces, a session of its own without a controlling terminal
  (started so by every launcher: no TIOCSTI into our terminal), and --die-with-parent so an aborted
  dispatch leaves nothing behind.

A write outside then fails in the kernel with EROFS/EACCES (ENOENT for hidden trees), which the
runners report as tool errors and dispatch counts as permission denials. The network stays (workers
call their API from inside); `network: none` gives the run an empty network namespace in which only
a local model on the host's loopback stays reachable (providers/netrelay.py). The mount plan itself
is in confine_mounts.py.

Policy: writers (code/resume/test) never launch unconfined unless the project says
`confinement: off` (RunSpec.extra["confinement"] == "off", read by dispatch from the main
checkout — never from the worktree, which its worker can edit); read-only modes run unconfined
with one warning when bwrap cannot work here. Gates run worker-written code: prepare_command(). Before trusting bwrap the first time (and whenever its
binary changes) the functional probe in providers/probe.py is run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec, RunSpec

WRITER_MODES = frozenset({"code", "resume", "test"})
INSTALL_FIX = "install the Debian package `bubblewrap` (sudo apt-get install bubblewrap)"
_warned: set[str] = set()


def confinement_required(mode: str) -> bool:
    """Modes that write the worktree must not run unconfined (unless the project opts out)."""
    return mode in WRITER_MODES


def confinement_off(spec: RunSpec) -> bool:
    value = spec.extra.get("confinement")
    # YAML 1.1 reads a bare `confinement: off` as False
    return value is False or str(value).strip().lower() in {"off", "false", "no"}


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


def project_setting_near(start: Path | None = None) -> str | None:
    """`confinement:` of the nearest .ai/project.yaml (a line match: status must not pay for YAML)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        f = d / ".ai" / "project.yaml"
        if f.is_file():
            try:
                m = re.search(r"(?m)^confinement:\s*[\"']?(\w+)", f.read_text(errors="replace"))
            except OSError:
                return None
            if not m:
                return None
            return "off" if m.group(1).lower() in {"off", "false", "no"} else "on"
        if (d / ".git").exists():
            return None
    return None


def trusted_project_root(workdir: Path) -> Path:
    """Where a run's project settings must be read from: the main checkout, not the worktree.

    A worktree's own .ai/project.yaml is a file its worker can edit: reading `confinement: off`
    from there would let a confined worker switch off the confinement of its next run (resume).
    For a linked worktree this follows .git → gitdir → commondir to the main checkout.
    """
    here = workdir.resolve()
    for d in (here, *here.parents):
        dotgit = d / ".git"
        if dotgit.is_dir():
            return d
        if dotgit.is_file():
            m = re.match(r"gitdir:\s*(.+)", dotgit.read_text(errors="replace").strip())
            if not m:
                return d
            gitdir = (d / m.group(1).strip()).resolve()
            common = gitdir / "commondir"
            if common.is_file():
                common_dir = (gitdir / common.read_text().strip()).resolve()
                if common_dir.name == ".git":
                    return common_dir.parent
            return d
    return here


def status(project_setting: str | None = None) -> dict[str, Any]:
    """For `pilothouse status` and the cockpit: is confinement in force, and if not, why.

    mode: "bwrap" (writers confined), "off" (the project opted out: show it in red),
    "unavailable" (writers refuse to launch; `reason` says why and how to fix it).
    """
    if project_setting is None:
        project_setting = project_setting_near()
    ok, reason, version, _du = _probe_bwrap()
    from pilothouse.providers import probe

    record = probe.load_record()
    probed = bool(ok and record and record.get("ok") and probe.record_matches_bwrap(record))
    if str(project_setting or "").lower() == "off":
        mode = "off"  # shown in red: the project chose to run writers unconfined
        reason = reason or "the project sets `confinement: off`: writers run unconfined"
    elif ok:
        mode = "bwrap"
    else:
        mode = "unavailable"
    return {"available": ok, "probed": probed, "bwrap_version": version, "reason": reason,
            "mode": mode, "probed_at": (record or {}).get("time")}


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"pilothouse: warning: {message}", file=sys.stderr)


def prepare(launch: LaunchSpec, spec: RunSpec, *, sandbox_in_tmp: bool = False) -> LaunchSpec:
    """The launch to actually run: wrapped in bwrap, or refused when a writer cannot be confined.
    `sandbox_in_tmp`: see confine_mounts.wrap."""
    if confinement_off(spec):
        return launch
    ok, reason = available()
    if not ok:
        if confinement_required(spec.mode):
            raise UserError(f"refusing to run a {spec.mode} task unconfined: {reason} "
                            "(or set `confinement: off` in .ai/project.yaml to accept the risk)")
        _warn_once(f"{spec.mode} runs are not confined: {reason}")
        return launch
    if confinement_required(spec.mode):
        from pilothouse.providers import probe

        exe = shutil.which(launch.argv[0], path=launch.env.get("PATH")) if launch.argv else None
        probe.ensure_probed(exe)  # raises UserError naming the failed check
    return wrap(launch, spec, sandbox_in_tmp=sandbox_in_tmp)


# Where a gate's HOME and XDG dirs live inside its sandbox: the sandbox's /tmp is a fresh private
# tmpfs, so they are new and empty for every gate and gone with it, and never exist on the host.
GATE_SANDBOX = Path("/tmp/.pilothouse-gate")


def prepare_command(argv: list[str], env: dict[str, str], workdir: Path, scratch: Path | None = None, *,
                    settings: dict[str, Any] | None = None) -> LaunchSpec:
    """A command that runs code the worker wrote (gate, setup) confined like a test-mode run.

    Gates execute the worktree's tests — i.e. worker-written code (a conftest.py is enough) — so
    running them unconfined would undo the worker's confinement. The command may write its
    worktree and its HOME/XDG dirs; everything else as for a worker. Those dirs are made in
    `scratch` on the host when given (the caller removes it), else inside the sandbox's private
    /tmp (GATE_SANDBOX: nothing to create or clean up on the host). `settings` are the project's
    (`confinement`, `network`); same refusal rules as prepare(). Without `scratch`, a command that
    is not confined (`confinement: off`) gets `env` as it is.
    """
    from pilothouse.providers.runners.base import Sandbox

    in_tmp = scratch is None
    root = GATE_SANDBOX if scratch is None else scratch
    dirs = {name: root / name for name in ("home", "config", "data", "state", "cache")}
    if not in_tmp:
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
    sb = Sandbox(root=root, shared_cache=dirs["cache"], **dirs)
    spec = RunSpec(run_id=root.name, provider=None, mode="test", model="", base_url="", workdir=workdir,
                   sandbox=sb, task_text="", task_file=root / "none", step_cap=0, timeout_s=0,
                   idle_timeout_s=0, extra=dict(settings or {}))
    if in_tmp and confinement_off(spec):
        return LaunchSpec(argv=list(argv), env=dict(env), cwd=workdir)
    child_env = {**env, "HOME": str(sb.home), "XDG_CONFIG_HOME": str(sb.config), "XDG_DATA_HOME": str(sb.data),
                 "XDG_STATE_HOME": str(sb.state), "XDG_CACHE_HOME": str(sb.cache)}
    return prepare(LaunchSpec(argv=list(argv), env=child_env, cwd=workdir), spec, sandbox_in_tmp=in_tmp)


def wrap(launch: LaunchSpec, spec: RunSpec, *, extra_ro: list[Path] | None = None,
         sandbox_in_tmp: bool = False) -> LaunchSpec:
    """argv prefixed with bwrap for this run, no policy checks (prepare() and the probe use it)."""
    from pilothouse.providers import confine_mounts

    return confine_mounts.wrap(launch, spec, extra_ro=extra_ro, sandbox_in_tmp=sandbox_in_tmp)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may contain spaces and parentheses: split after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def signal_sandbox(pid: int, sig: int) -> bool:
    """Deliver `sig` to the worker inside a bwrap sandbox whose outer bwrap process is `pid`.

    bwrap does not forward signals, and killing it kills the sandbox at once (--die-with-parent
    means SIGKILL): a graceful SIGTERM has to reach the processes inside directly. They run in
    their own session, so the launcher's process-group signal misses them. Returns False when
    `pid` is not a bwrap process or nothing inside was signalled (the caller then signals as usual).
    """
    children = _children_map()
    if _comm(pid) != "bwrap":
        # under `network: none` the launch is netrelay → bwrap: look one level down
        below = [c for c in children.get(pid, []) if _comm(c) == "bwrap"]
        if not below:
            return False
        pid = below[0]
    todo, found = list(children.get(pid, [])), []
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        if _comm(p) != "bwrap":  # bwrap's own init inside the namespace just reaps; leave it be
            found.append(p)
    sent = False
    for p in found:
        try:
            os.kill(p, sig)
            sent = True
        except (ProcessLookupError, PermissionError):
            pass
    return sent
