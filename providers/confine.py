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
- read-write: the run's own sandbox (its HOME/XDG dirs), the provider's shared cache, the runner's
  declared writable paths and — for code/resume/test only — the worktree. The worktree's `.git`
  stays read-only so a worker cannot plant hooks or repoint it for git commands run later outside;
- a user namespace with every capability dropped even when pilothouse runs as root (root keeps
  CAP_SYS_ADMIN under bwrap otherwise and could simply remount / read-write), no nested user
  namespaces, its own pid/ipc/uts namespaces, a new session (no TIOCSTI into our terminal), and
  --die-with-parent so an aborted dispatch leaves nothing behind.

A write outside then fails in the kernel with EROFS (or ENOENT for hidden trees), which the runners
report as tool errors and dispatch counts as permission denials.

Policy: writers (code/resume/test) never launch unconfined unless the project says
`confinement: off` (RunSpec.extra["confinement"] == "off"); read-only modes run unconfined with
one warning when bwrap cannot work here. Before trusting bwrap the first time (and whenever its
binary changes) the functional probe in providers/probe.py is run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
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
    return _smoke(bwrap, (st.st_mtime_ns, st.st_size))


def available() -> tuple[bool, str]:
    """(True, "") when bwrap can build a sandbox here; else (False, the exact reason and fix)."""
    ok, reason, _version, _du = _probe_bwrap()
    return ok, reason


def bwrap_version() -> str | None:
    return _probe_bwrap()[2]


def status(project_setting: str | None = None) -> dict[str, Any]:
    """For `pilothouse status` and the cockpit: is confinement in force, and if not, why."""
    ok, reason, version, _du = _probe_bwrap()
    from pilothouse.providers import probe

    record = probe.load_record()
    probed = bool(ok and record and record.get("ok") and probe.record_matches_bwrap(record))
    if str(project_setting or "").lower() == "off":
        mode = "off"  # shown in red: the project chose to run writers unconfined
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


def prepare(launch: LaunchSpec, spec: RunSpec) -> LaunchSpec:
    """The launch to actually run: wrapped in bwrap, or refused when a writer cannot be confined."""
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
    return wrap(launch, spec)


# --- building the bwrap argv -------------------------------------------------------------------

def _real(p: Path | str) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(p))))


def _within(child: Path, parent: Path) -> bool:
    return child == parent or child.is_relative_to(parent)


def hidden_roots(spec: RunSpec | None = None) -> list[Path]:
    """Trees the worker must not see at all (they hold keys, other runs, other worktrees, logs)."""
    roots = [_real(Path.home()), paths.config_dir(), paths.data_dir(), paths.state_dir(),
             paths.cache_dir(), paths.secrets_dir()]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        roots.append(Path(runtime))
    if Path("/run/user").is_dir():
        roots.append(Path("/run/user"))
    out: list[Path] = []
    for r in roots:
        r = _real(r)
        if r != Path("/") and r.is_dir() and r not in out and not _within(Path("/tmp"), r):
            out.append(r)
    return out


def _runtime_paths(launch: LaunchSpec) -> list[Path]:
    """What the runner needs to start: its interpreter/prefix, its binary, its PATH, its package."""
    found: list[Path] = []
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}:
        found.append(_real(p))
    found.append(_real(Path(__file__).resolve().parent.parent))  # the pilothouse package (editable)
    found += [_real(p) for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)]
    found.append(_real(paths.runners_dir()))
    env_path = launch.env.get("PATH", os.environ.get("PATH", ""))
    found += [_real(p) for p in env_path.split(os.pathsep) if p and os.path.isabs(p)]
    if launch.argv:
        exe = shutil.which(launch.argv[0], path=env_path) or launch.argv[0]
        if os.path.isabs(exe):
            target = _real(exe)
            found.append(target.parent)
            if not target.is_relative_to("/tmp"):
                found.append(target.parent.parent)  # the prefix of bin/ (lib/, node_modules)
    return found


def _git_paths(workdir: Path) -> tuple[list[Path], list[Path]]:
    """(read-only paths inside the worktree, read-only git dirs outside it) for git to work read-only."""
    dotgit = workdir / ".git"
    inside = [dotgit] if dotgit.exists() else []
    outside: list[Path] = []
    if dotgit.is_file():
        m = re.match(r"gitdir:\s*(.+)", dotgit.read_text(errors="replace").strip())
        if m:
            gitdir = _real(workdir / m.group(1).strip())
            outside.append(gitdir)
            common = gitdir / "commondir"
            if common.is_file():
                outside.append(_real(gitdir / common.read_text().strip()))
    return inside, outside


def wrap(launch: LaunchSpec, spec: RunSpec, *, extra_ro: list[Path] | None = None) -> LaunchSpec:
    """argv prefixed with bwrap for this run (no policy checks: prepare() and the probe call this)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise UserError(f"bubblewrap (bwrap) is not installed: {INSTALL_FIX}")
    workdir = _real(spec.workdir)
    hidden = hidden_roots(spec)
    for h in hidden:
        if spec.mode in WRITER_MODES and _within(h, workdir):
            raise UserError(f"workdir {workdir} contains {h}; a writer needs its own worktree, "
                            "not a directory above your home or pilothouse's data")
    # (path, kind): kind 0 = tmpfs hide, 1 = rw bind, 2 = ro bind; applied parents first
    ops: dict[Path, int] = {}

    def add(p: Path, kind: int) -> None:
        p = _real(p)
        if p == Path("/") or not p.exists():
            return
        if kind == 2 and any(_within(h, p) for h in hidden):
            return  # binding it back would re-expose a hidden tree (e.g. a PATH entry of $HOME)
        rank = {0: 0, 2: 1, 1: 2}  # the same path asked twice: rw beats ro beats hidden
        if p not in ops or rank[kind] > rank[ops[p]]:
            ops[p] = kind

    for h in hidden:
        add(h, 0)
    for p in _runtime_paths(launch) + list(launch.readonly) + list(extra_ro or []):
        if any(_within(_real(p), h) for h in [*hidden, Path("/tmp")]):
            add(p, 2)
    if spec.sandbox.credential is not None:
        add(Path(os.path.realpath(spec.sandbox.credential)), 2)
    git_inside, git_outside = _git_paths(workdir)
    for p in git_outside:
        add(p, 2)
    writable = [spec.sandbox.root, spec.sandbox.shared_cache, *launch.writable]
    for p in writable:
        add(p, 1)
    if spec.mode in WRITER_MODES:
        add(workdir, 1)
        for p in git_inside:
            add(p, 2)
    else:
        add(workdir, 2)

    args = [bwrap, "--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if _probe_bwrap()[3]:
        args.append("--disable-userns")
    if _cut_network(spec):
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    args += _tmp_skeleton(ops)
    for p, kind in sorted(ops.items(), key=lambda item: (len(item[0].parts), item[1])):
        if kind == 0:
            args += ["--perms", "0755", "--tmpfs", str(p)]
        elif kind == 1:
            args += ["--bind", str(p), str(p)]
        else:
            args += ["--ro-bind", str(p), str(p)]
    for p, kind in ops.items():
        if kind == 0:
            args += ["--remount-ro", str(p)]  # the hidden tree's stand-in is not a place to write either
    env = dict(launch.env)
    home = env.get("HOME")
    if not home or not _within(_real(home), _real(spec.sandbox.root)):
        env["HOME"] = str(spec.sandbox.home)
    env.pop("TMPDIR", None)  # the host's TMPDIR may be hidden; /tmp is private anyway
    args += ["--chdir", str(workdir), "--"]
    return replace(launch, argv=args + list(launch.argv), env=env)


def _tmp_skeleton(ops: dict[Path, int]) -> list[str]:
    """Read-only stand-ins for the /tmp directories that lead to what is bound under /tmp.

    /tmp is a private writable tmpfs; the parents bwrap would create there for a bind mount point
    (say the main checkout around its .git) would be writable and turn a blocked write into one
    that silently lands in the private /tmp. Made 0555 up front, they refuse it (EACCES: the
    worker has no capabilities, so owner permission bits hold even for uid 0).
    """
    tmp = Path("/tmp")
    dirs: set[Path] = set()
    for p in ops:
        if p.is_relative_to(tmp) and p != tmp:
            for parent in p.parents:
                if parent == tmp:
                    break
                if parent not in ops:
                    dirs.add(parent)
    out: list[str] = []
    for d in sorted(dirs, key=lambda d: len(d.parts)):
        out += ["--perms", "0555", "--dir", str(d)]
    return out


def _cut_network(spec: RunSpec) -> bool:
    """Whether this run gets its own, empty network namespace (`network: none` in the project).

    Workers call their model API from inside the sandbox, so a remote provider needs the network
    and the option cannot apply to it (one warning). A local provider is served on the host's
    loopback, which a new network namespace does not share.
    """
    if str(spec.extra.get("network", "")).lower() != "none":
        return False
    _warn_once(f"network: none is not applied to provider endpoint {spec.base_url!r}: the worker "
               "reaches its model from inside the sandbox")
    return False


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
    if _comm(pid) != "bwrap":
        return False
    children = _children_map()
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
