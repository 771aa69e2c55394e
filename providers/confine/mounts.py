"""The mount plan of a confined run: what the worker sees, what it may write (see policy.py).

Kept apart from the policy (policy.py): this is the part a reviewer audits line by line.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pilothouse.providers import paths
from pilothouse.providers.confine.bwrap import INSTALL_FIX, WRITER_MODES, _probe_bwrap, _warn_once, bwrap_path
from pilothouse.providers.confine.repoview import (
    git_paths,
    holdout_path,
    main_checkout,
    protected_paths,
    read_setting,
)
from pilothouse.providers.confine.repoview import real as _real
from pilothouse.providers.confine.repoview import within as _within
from pilothouse.providers.confine.shared import share_args, shared_folders
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec, RunSpec

_ROOT, _TMP = Path("/"), Path("/tmp")
# The plan's host-side path work (realpaths of PATH, tool roots, hidden trees) is the same for
# every gate and worker of a supervisor that lives for days: kept a short while, keyed on what it
# is computed from, so a changed PATH/HOME takes effect at once and anything else within this TTL.
PLAN_TTL_S = 30.0
_plan_cache: dict[tuple[Any, ...], tuple[float, Any]] = {}
_plan_lock = threading.Lock()
_clock = time.monotonic  # the tests move it


def _cached(key: tuple[Any, ...], compute: Callable[[], Any], still_valid: Callable[[Any], bool]) -> Any:
    now = _clock()
    with _plan_lock:
        hit = _plan_cache.get(key)
    if hit is not None and now < hit[0] and still_valid(hit[1]):
        return hit[1]
    value = compute()
    with _plan_lock:
        if len(_plan_cache) >= 64:
            for k in [k for k, (expires, _v) in _plan_cache.items() if expires <= now] or list(_plan_cache):
                del _plan_cache[k]
        _plan_cache[key] = (now + PLAN_TTL_S, value)
    return value


def clear_plan_cache() -> None:
    with _plan_lock:
        _plan_cache.clear()


def hidden_roots(spec: RunSpec | None = None) -> list[Path]:
    """Trees the worker must not see at all (they hold keys, other runs, other worktrees, logs)."""
    roots = [Path.home(), paths.config_dir(), paths.data_dir(), paths.state_dir(),
             paths.cache_dir(), paths.secrets_dir()]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        roots.append(Path(runtime))
    # /run holds the host's unix sockets (system D-Bus, docker, databases): a worker that can
    # connect to them talks to host services as the user pilothouse runs as (root, here and there)
    roots.append(Path("/run"))
    # a cluster run's: the supervisor's checkout and dirs, seen by a node sharing its filesystem
    # (core/executor/cluster.py), as they are hidden from a run on the supervisor's machine
    hide = spec.extra.get("hide") if spec is not None else None
    roots += [Path(p) for p in hide if isinstance(p, str) and os.path.isabs(p)] if isinstance(hide, list) else []
    candidates = tuple(str(r) for r in roots)

    def compute() -> tuple[tuple[Path, ...], tuple[str, ...]]:
        out: list[Path] = []
        absent: list[str] = []
        for c in candidates:
            r = _real(c)
            if not r.is_dir():
                absent.append(c)
            elif r != _ROOT and r not in out and not _within(_TMP, r):
                out.append(r)
        return tuple(out), tuple(absent)

    def still_valid(value: tuple[tuple[Path, ...], tuple[str, ...]]) -> bool:
        # a tree created since (say pilothouse's data dir) must be hidden from the next run on,
        # and one removed since cannot take a tmpfs: either way, look again
        return all(r.is_dir() for r in value[0]) and not any(os.path.isdir(c) for c in value[1])

    present: tuple[Path, ...] = _cached(("hidden", candidates), compute, still_valid)[0]
    return list(present)


@lru_cache(maxsize=1)
def _interpreter_paths() -> tuple[Path, ...]:
    """This Python and the pilothouse package (the builtin worker and netrelay run on them)."""
    found = [_real(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}]
    # the pilothouse package itself (an editable install lives wherever it was cloned, /tmp included):
    # the folder that holds its __init__.py, whatever depth this module sits at
    import pilothouse

    found.append(_real(Path(pilothouse.__file__).resolve().parent))
    found += [_real(p) for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)]
    return tuple(found)


def _runtime_paths(launch: LaunchSpec) -> list[Path]:
    """What the runner needs to start: its interpreter/prefix, its binary, its PATH, its package."""
    found = list(_interpreter_paths())
    found.append(_real(paths.runners_dir()))
    # name resolution: resolv.conf is often a link into /run (systemd-resolved), which is hidden
    found += [_real("/etc/resolv.conf"), _real("/etc/hosts")]
    env_path = launch.env.get("PATH", os.environ.get("PATH", ""))
    entries = [p for p in env_path.split(os.pathsep) if p and os.path.isabs(p)]
    found += [_real(p) for p in entries]
    found += _tool_roots(entries)
    if launch.argv:
        exe = shutil.which(launch.argv[0], path=env_path) or launch.argv[0]
        if os.path.isabs(exe):
            target = _real(exe)
            found.append(target.parent)
            if not target.is_relative_to("/tmp"):
                found.append(target.parent.parent)  # the prefix of bin/ (lib/, node_modules)
    return found


# Dot-directories under $HOME that hold credentials or personal data: never bound back in, even
# when a PATH entry lives inside one.
_PRIVATE_DOTDIRS = frozenset({".ssh", ".gnupg", ".aws", ".azure", ".config", ".local", ".docker", ".kube",
                              ".netrc", ".password-store", ".pki", ".mozilla", ".cache", ".claude", ".codex",
                              ".pilothouse", ".git-credentials"})


def _tool_roots(path_entries: list[str]) -> list[Path]:
    """Version managers' roots (~/.pyenv, ~/.rbenv, ~/.asdf, ~/.cargo, ~/.nvm …) behind PATH entries.

    A PATH entry such as ~/.pyenv/shims is a script that runs ~/.pyenv/libexec/pyenv: binding only
    the entry leaves `python` failing with 127 inside the sandbox, so the tool's root is bound
    read-only too. Private dot-directories stay hidden.
    """
    home = _real(Path.home())
    roots: list[Path] = []
    for entry in path_entries:
        p = _real(entry)
        if not _within(p, home) or p == home:
            continue
        top = p.relative_to(home).parts[0]
        if top.startswith(".") and top not in _PRIVATE_DOTDIRS:
            roots.append(home / top)
            # ~/.cargo/bin/cargo is rustup's proxy: the toolchains it runs are in ~/.rustup
            if top == ".cargo" and (home / ".rustup").is_dir():
                roots.append(home / ".rustup")
    return roots


def _runtime_binds(launch: LaunchSpec, hidden: list[Path], writable: list[Path]) -> tuple[Path, ...]:
    """The runtime paths (_runtime_paths) that need a read-only bind: those under a hidden tree or
    /tmp (the rest is visible through the read-only root anyway), never one that holds a hidden tree."""
    env_path = launch.env.get("PATH", os.environ.get("PATH", ""))
    argv0 = launch.argv[0] if launch.argv else None
    # which program argv[0] names is looked up each time (a runner installed a moment ago must
    # start at once); `./tool` resolves against the cwd
    exe = shutil.which(argv0, path=env_path) if argv0 else None
    where = str(launch.cwd) if argv0 and "/" in argv0 and not os.path.isabs(argv0) else None
    key = ("runtime", env_path, argv0, exe, where, str(paths.runners_dir()), str(Path.home()), tuple(hidden))

    def compute() -> tuple[Path, ...]:
        covered = [*hidden, _TMP]
        found = dict.fromkeys(_runtime_paths(launch))
        return tuple(p for p in found if p != _ROOT and any(_within(p, h) for h in covered)
                     and not any(_within(h, p) for h in hidden))

    def still_valid(value: tuple[Path, ...]) -> bool:
        # what this run may write could have been re-pointed (a symlink) since it was resolved:
        # such paths are resolved again right now, as they always were
        return not any(_within(p, w) for p in value for w in writable)

    binds: tuple[Path, ...] = _cached(key, compute, still_valid)
    return binds


def _drop_nested(ops: dict[Path, int]) -> dict[Path, int]:
    """The plan without binds that repeat their nearest enclosing op.

    A bind of P onto itself (ro or rw) under a bind of an ancestor A onto itself of the same kind,
    with no op on a path between A and P, shows exactly what A's recursive bind already shows
    there (P is a realpath, so the same host directory), with the same writability: bwrap would
    only redo the work (each bind re-reads the mount table). Likewise a hidden tree inside a
    hidden tree (pilothouse's dirs under the hidden $HOME): the outer empty tmpfs already hides it.
    An op whose nearest enclosing op is of another kind (ro under rw, rw under ro, a bind under a
    hidden tmpfs, a hide under a bind) is kept.
    """
    out: dict[Path, int] = {}
    for p, kind in ops.items():
        above = next((a for a in p.parents if a in ops), None)
        if above is not None and ops[above] == kind:
            continue
        out[p] = kind
    return out


def wrap(launch: LaunchSpec, spec: RunSpec, *, extra_ro: list[Path] | None = None,
         sandbox_in_tmp: bool = False) -> LaunchSpec:
    """argv prefixed with bwrap for this run (no policy checks: prepare() and the probe call this).

    `sandbox_in_tmp`: the sandbox dirs of `spec` are paths under /tmp made inside the sandbox's own
    private /tmp (gates: a throwaway HOME that never exists on the host), not host dirs to bind.
    """
    bwrap = bwrap_path()
    if bwrap is None:
        raise UserError(f"bubblewrap (bwrap) is not installed: {INSTALL_FIX}")
    workdir = _real(spec.workdir)
    hidden = hidden_roots(spec)
    for h in hidden:
        if spec.mode in WRITER_MODES and _within(h, workdir):
            raise UserError(f"workdir {workdir} contains {h}; a writer needs its own worktree, "
                            "not a directory above your home or pilothouse's data")
    git_inside, git_outside = git_paths(workdir)
    main = main_checkout(workdir, git_outside)
    # hidden, and never shown again by binding a directory above it
    shut = hidden if main is None else [*hidden, main]
    extra_read = read_setting(spec, main)
    shared = shared_folders(spec, main)  # sandbox.share: shared.py
    for p in extra_read:
        for h in shut:
            if _within(h, p):
                raise UserError(f"sandbox.read in .ai/project.yaml: {p} contains {h}, which the sandbox "
                                f"hides; name the directory the tool needs (say {p}/.venv), not one above it")
    # (path, kind): kind 0 = tmpfs hide, 1 = rw bind, 2 = ro bind; applied parents first
    ops: dict[Path, int] = {}

    def add(p: Path, kind: int, *, real: bool = False) -> None:
        if not real:
            p = _real(p)
        if p == _ROOT or not p.exists():
            return
        if kind == 2 and any(_within(h, p) for h in shut):
            return  # binding it back would re-expose a hidden tree (e.g. a PATH entry of $HOME)
        rank = {0: 0, 2: 1, 1: 2}  # the same path asked twice: rw beats ro beats hidden
        if p not in ops or rank[kind] > rank[ops[p]]:
            ops[p] = kind

    for h in hidden:
        add(h, 0, real=True)
    if main is not None:
        add(main, 0, real=True)  # its .git is bound back below (git_outside)
    held = holdout_path(spec, main)
    if held is not None:
        add(held, 0, real=True)  # gates.holdout: tests no worker may read, whatever its mode
    sb = spec.sandbox
    private = list(dict.fromkeys([sb.root, sb.home, sb.config, sb.data, sb.state, sb.cache, sb.shared_cache]))
    writable = [_real(p) for p in (*launch.writable, *(() if sandbox_in_tmp else private))]
    if spec.mode in WRITER_MODES:
        writable.append(workdir)
    for p in _runtime_binds(launch, shut, writable):
        add(p, 2, real=True)
    covered = [*shut, _TMP]
    for p in {_real(p) for p in (*launch.readonly, *(extra_ro or []))}:
        if any(_within(p, h) for h in covered):
            add(p, 2)
    for p in extra_read:
        if not _within(p, workdir):  # inside the worktree it is the worker's anyway
            add(p, 2, real=True)
    if sb.credential is not None:
        add(Path(os.path.realpath(sb.credential)), 2)
    for p in git_outside:
        add(p, 2)
    if not sandbox_in_tmp:
        # the sandbox's own files (run.json, task.md, the credential link, the lock) stay read-only:
        # dispatch reads them back; only the worker's HOME and XDG dirs are its to write
        add(sb.root, 2)
        for p in (sb.home, sb.config, sb.data, sb.state, sb.cache, sb.shared_cache):
            add(p, 1)
    for p in launch.writable:
        add(p, 1)
    if spec.mode in WRITER_MODES:
        add(workdir, 1)
        # also read-only inside the worktree: what pilothouse itself reads back and trusts
        # (the project's settings and gates, the runtime store when the workdir is the main checkout)
        for p in (*git_inside, workdir / ".ai" / "project.yaml", workdir / ".ai" / "runtime",
                  *protected_paths(spec, workdir)):  # gates.protected: what the gates stand on
            add(p, 2)
    else:
        add(workdir, 2)
    target = _net_target(spec)
    sock_dir = None
    if target is not None:
        # short path: unix socket paths are limited to 108 bytes; bound into the private /tmp
        import tempfile  # lazy: only `network: none` needs it

        sock_dir = Path(tempfile.mkdtemp(prefix="pilothouse-net-", dir="/tmp"))
        add(sock_dir, 1)
    ops = _drop_nested(ops)

    # No --new-session: every launcher starts the sandbox as the leader of a session of its own with
    # no controlling terminal (start_new_session=True: dispatch_proc, gates, probe), which is what
    # that flag is for (no TIOCSTI into the operator's terminal; without a controlling tty it needs
    # CAP_SYS_ADMIN, dropped). bwrap's own setsid() would also start a fresh scheduling autogroup at
    # nice 0 and undo worker_nice (core/dispatch/priority.py) for everything inside.
    args = [bwrap, "--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent"]
    if _probe_bwrap()[3]:
        args.append("--disable-userns")
    if target is not None:
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    args += _tmp_skeleton(ops)
    if sandbox_in_tmp:
        args += _private_dirs(private, ops)
    for p, kind in sorted(ops.items(), key=lambda item: (len(item[0].parts), item[1])):
        if kind == 0:
            args += ["--perms", "0755", "--tmpfs", str(p)]
        elif kind == 1:
            args += ["--bind", str(p), str(p)]
        else:
            args += ["--ro-bind", str(p), str(p)]
    if main is not None and shared:
        taken = {q.relative_to(main).parts[0] for q in ops if _within(q, main) and q != main}
        args += share_args(shared, main, workdir, writer=spec.mode in WRITER_MODES, shut=shut, taken=taken)
    for p, kind in ops.items():
        if kind == 0:
            args += ["--remount-ro", str(p)]  # the hidden tree's stand-in is not a place to write either
    env = dict(launch.env)
    home = env.get("HOME")
    if sandbox_in_tmp:
        if not home or not _within(Path(os.path.normpath(home)), sb.root):
            env["HOME"] = str(sb.home)
    elif not home or not _within(_real(home), _real(sb.root)):
        env["HOME"] = str(sb.home)
    env.pop("TMPDIR", None)  # the host's TMPDIR may be hidden; /tmp is private anyway
    args += ["--chdir", str(workdir), "--"]
    argv = list(launch.argv)
    if target is not None and sock_dir is not None:
        sock, hostport = str(sock_dir / "s"), f"[{target[0]}]:{target[1]}"
        relay = [sys.executable, "-I", "-m", "pilothouse.providers.netrelay"]
        args = [*relay, "outer", "--sock", sock, "--target", hostport, "--", *args,
                *relay, "inner", "--sock", sock, "--listen", hostport, "--"]
    return replace(launch, argv=args + argv, env=env)


def _private_dirs(dirs: list[Path], ops: dict[Path, int]) -> list[str]:
    """`--dir`s for a sandbox that lives in the private /tmp (0700, made fresh by bwrap each run).

    Nothing of the plan may sit on or around them: a bind there would put a host directory where
    the command expects its throwaway HOME (or hide it).
    """
    for d in dirs:
        if os.path.normpath(d) != str(d) or not _within(d, _TMP) or d == _TMP:
            raise UserError(f"sandbox dir {d} is not a plain path inside the private /tmp")
        for p in ops:
            if _within(p, d) or _within(d, p):
                raise UserError(f"cannot make {d} in the sandbox's private /tmp: {p} is mounted there")
    out: list[str] = []
    for d in sorted(dirs, key=lambda d: len(d.parts)):
        out += ["--perms", "0700", "--dir", str(d)]
    return out


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


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _net_target(spec: RunSpec) -> tuple[str, int] | None:
    """(host, port) of the model when this run gets no network (`network: none`), else None.

    Workers call their model from inside the sandbox. A local provider (served on the host's
    loopback) stays reachable through providers/netrelay.py and nothing else does; a remote
    provider needs the network, so the option cannot apply to it (one warning says so).
    """
    if str(spec.extra.get("network", "")).lower() != "none":
        return None
    url = urlsplit(str(spec.base_url or ""))
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = None
    if url.hostname in LOOPBACK_HOSTS and port:
        return url.hostname, port
    _warn_once(f"network: none is not applied to {getattr(spec.provider, 'key', 'this provider')}: its "
               f"endpoint {url.hostname or spec.base_url!r} is not on this machine and the worker must reach it")
    return None
