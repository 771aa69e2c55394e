"""Confinement policy: which launches must run in bubblewrap, refusing writers that cannot, and
the gate's variant (prepare_command); the sandbox is found again by its pid for signals.

The package docstring (confine/__init__.py) says what the sandbox allows.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from pilothouse.providers.confine.bwrap import (
    WRITER_MODES,
    _probe_bwrap,
    _warn_once,
    available,
)
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec, RunSpec, Sandbox


def confinement_required(mode: str) -> bool:
    """Modes that write the worktree must not run unconfined (unless the project opts out)."""
    return mode in WRITER_MODES


def confinement_off(spec: RunSpec) -> bool:
    value = spec.extra.get("confinement")
    # YAML 1.1 reads a bare `confinement: off` as False
    return value is False or str(value).strip().lower() in {"off", "false", "no"}


OPT_OUT = "or set `confinement: off` in .ai/project.yaml to accept the risk"


def unconfined_reason(project_setting: str | None) -> str | None:
    """Why writers would be refused here (bubblewrap missing or broken, with the fix), or None when
    they can be confined or the project opted out: `job start` asks before launching anything."""
    if str(project_setting or "").lower() in {"off", "false", "no"}:
        return None
    ok, reason = available()
    return None if ok else reason


def project_setting_near(start: Path | None = None) -> str | None:
    """`confinement:` of the nearest .ai/project.yaml (a line match: status must not pay for YAML)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        f = d / ".ai" / "project.yaml"
        if f.is_file():
            from pilothouse.providers import workerfs

            # the nearest may be a worktree's: read through the door (a FIFO there must not hang status)
            try:
                m = re.search(r"(?m)^confinement:\s*[\"']?(\w+)", workerfs.read(d, ".ai/project.yaml", 1 << 20).text())
            except (OSError, ValueError):
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
            from pilothouse.providers import workerfs

            # the worktree's .git (bound read-only into the sandbox) is still read through the door
            m = re.match(r"gitdir:\s*(.+)", workerfs.read(d, ".git", 4096).text().strip())
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
    from pilothouse.providers.confine import probe

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


def prepare(launch: LaunchSpec, spec: RunSpec, *, sandbox_in_tmp: bool = False) -> LaunchSpec:
    """The launch to actually run: wrapped in bwrap, or refused when a writer cannot be confined.
    `sandbox_in_tmp`: see confine_mounts.wrap."""
    if confinement_off(spec):
        return launch
    ok, reason = available()
    if not ok:
        if confinement_required(spec.mode):
            raise UserError(f"refusing to run a {spec.mode} task unconfined: {reason} ({OPT_OUT})")
        _warn_once(f"{spec.mode} runs are not confined: {reason}")
        return launch
    if confinement_required(spec.mode):
        from pilothouse.providers.confine import probe

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
                 "XDG_STATE_HOME": str(sb.state), "XDG_CACHE_HOME": str(sb.cache), **_go_dirs(env, sb),
                 **_rust_dirs(env, sb)}
    return prepare(LaunchSpec(argv=list(argv), env=child_env, cwd=workdir), spec, sandbox_in_tmp=in_tmp)


def _go_dirs(env: dict[str, str], sb: Sandbox) -> dict[str, str]:
    """Go's per-user dirs for a gate, moved with its HOME: the build cache must be writable, and
    GOPATH or GOMODCACHE in the operator's home (set explicitly, as `go env -w` users and CI images
    do) would name the hidden, read-only stand-in, failing `go test` before it builds anything. A
    GOPATH or GOMODCACHE elsewhere (a shared module cache in `sandbox.read`) is the operator's
    choice and stays."""
    home = env.get("HOME") or os.path.expanduser("~")
    out = {"GOCACHE": str(sb.cache / "go-build")}
    for var, mine in (("GOPATH", sb.home / "go"), ("GOMODCACHE", sb.home / "go" / "pkg" / "mod")):
        value = env.get(var)
        if value and any(Path(p).is_relative_to(home) for p in value.split(os.pathsep) if os.path.isabs(p)):
            out[var] = str(mine)
    return out


def _rust_dirs(env: dict[str, str], sb: Sandbox) -> dict[str, str]:
    """rustup's and cargo's per-user dirs for a gate, moved with its HOME: rustup's proxy (the
    `cargo` in ~/.cargo/bin) finds its toolchains through RUSTUP_HOME, by default under the HOME the
    gate no longer has — the operator's ~/.rustup, shown read-only (mounts._tool_roots), is named
    instead; cargo's own cache and registry go to the gate's HOME, where it may write."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    rustup = home / ".rustup"
    on_path = any(Path(p) == home / ".cargo" / "bin" for p in env.get("PATH", "").split(os.pathsep) if p)
    if not on_path or not rustup.is_dir() or env.get("RUSTUP_HOME"):
        return {}
    return {"RUSTUP_HOME": str(rustup), "CARGO_HOME": env.get("CARGO_HOME") or str(sb.home / ".cargo")}


def wrap(launch: LaunchSpec, spec: RunSpec, *, extra_ro: list[Path] | None = None,
         sandbox_in_tmp: bool = False) -> LaunchSpec:
    """argv prefixed with bwrap for this run, no policy checks (prepare() and the probe use it)."""
    from pilothouse.providers.confine import mounts as confine_mounts

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
