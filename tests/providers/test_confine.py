"""Confinement with the real bwrap: what a confined worker can and cannot write, see and outlive.

These tests FAIL (never skip) when bwrap cannot build a sandbox here: a machine that cannot
confine workers must not look green.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine.probe import WRITER, probe_spec, run_writer
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec, RunSpec
from support import git, guard, until


def require_confinement() -> None:
    ok, reason = confine.available()
    assert ok, f"confinement is not available on this machine: {reason}"


@pytest.fixture
def layout(git_repo: Path, tmp_path: Path) -> dict[str, Path]:
    """A repo with two task worktrees where pilothouse keeps them (under its data dir)."""
    require_confinement()
    wt_root = paths.data_dir() / "worktrees" / "repo-test"
    own, other = wt_root / "job" / "own", wt_root / "job" / "other"
    git(git_repo, "worktree", "add", "-q", "-b", "own", str(own))
    git(git_repo, "worktree", "add", "-q", "-b", "other", str(other))
    return {"main": git_repo, "own": own, "other": other, "base": tmp_path}


def spec_for(layout: dict[str, Path], mode: str = "code") -> RunSpec:
    return probe_spec(paths.providers_dir() / "sim" / "runs" / f"r-{mode}", layout["own"], mode=mode)


def run_confined(spec: RunSpec, code: str, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:
    launch = LaunchSpec(argv=[sys.executable, "-I", "-c", code, *args],
                        env=env or {"PATH": "/usr/bin:/bin", "HOME": str(spec.sandbox.home)},
                        cwd=spec.workdir)
    wrapped = confine.wrap(launch, spec)
    return subprocess.run(wrapped.argv, env=wrapped.env, cwd=wrapped.cwd, capture_output=True, text=True,
                          timeout=guard(60), stdin=subprocess.DEVNULL)


def test_bwrap_is_available_here():
    require_confinement()
    st = confine.status()
    assert st["available"] and st["mode"] == "bwrap" and st["bwrap_version"]


def test_writer_can_write_its_worktree_and_nothing_outside(layout, isolated_home):
    spec = spec_for(layout)
    targets = {
        "own": layout["own"] / "ok.txt",
        "own-nested": layout["own"] / "src" / "new.py",
        "sandbox": spec.sandbox.home / "note",
        "other": layout["other"] / "x",
        "main": layout["main"] / "x",
        "main-git": layout["main"] / ".git" / "hooks" / "post-checkout",
        "own-git": layout["own"] / ".git",
        "home": isolated_home / "x",
        "home-bashrc": isolated_home / ".bashrc",
        "tmp": Path("/tmp") / f"pilothouse-escape-{os.getpid()}",
        "secrets": paths.secrets_dir() / "stolen",
        "logs": paths.logs_dir() / "x",
        "sandbox-record": spec.sandbox.root / "task.md",
        "project-settings": layout["own"] / ".ai" / "project.yaml",
        "runtime-store": layout["own"] / ".ai" / "runtime" / "events.jsonl",
    }
    (layout["own"] / ".ai" / "runtime").mkdir(parents=True)
    (layout["own"] / ".ai" / "project.yaml").write_text("confinement: on\n")
    (layout["own"] / "src").mkdir(exist_ok=True)
    before = {p: (p.read_bytes() if p.is_file() else None) for p in targets.values()}
    out = run_writer(spec, list(targets.values()))
    assert out[str(targets["own"])] == "ok" and targets["own"].read_text() == "probe\n"
    assert out[str(targets["own-nested"])] == "ok"
    assert out[str(targets["sandbox"])] == "ok"
    for name in ("other", "main", "main-git", "own-git", "home", "home-bashrc", "secrets", "logs",
                 "sandbox-record", "project-settings", "runtime-store"):
        path = targets[name]
        assert out[str(path)] in {"EROFS", "ENOENT", "EACCES"}, (name, out[str(path)])
        now = path.read_bytes() if path.is_file() else None
        assert now == before[path], f"{name}: {path} changed on the host"
    # /tmp is private: the write succeeds inside and never reaches the host's /tmp
    assert not targets["tmp"].exists()


def test_explore_and_review_get_no_writable_worktree(layout):
    for mode in ("explore", "review", "plan"):
        spec = spec_for(layout, mode)
        target = layout["own"] / f"{mode}.txt"
        out = run_writer(spec, [target, spec.sandbox.home / "ok"])
        assert out[str(target)] == "EROFS", (mode, out)
        assert out[str(spec.sandbox.home / "ok")] == "ok"
        assert not target.exists()


def test_worker_still_sees_its_worktree_and_git_history_read_only(layout):
    spec = spec_for(layout, "explore")
    proc = run_confined(spec, "import subprocess,sys; r=subprocess.run(['git','log','--oneline'],"
                              "capture_output=True,text=True); print(r.returncode, r.stdout.strip())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 ") and "initial" in proc.stdout


def test_private_tmp_and_home_is_the_sandbox_home(layout, isolated_home):
    spec = spec_for(layout)
    marker = layout["base"] / "host-only-file"
    marker.write_text("host")
    code = ("import os, json, sys; open('/tmp/mine','w').write('x');"
            "print(json.dumps({'tmp': sorted(os.listdir('/tmp')), 'home': os.environ['HOME'],"
            " 'real_home_visible': sorted(os.listdir(sys.argv[1])), 'host_tmp_file': os.path.exists(sys.argv[2])}))")
    proc = run_confined(spec, code, str(isolated_home), str(marker),
                        env={"PATH": "/usr/bin:/bin", "HOME": str(isolated_home)})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    # own worktree and sandbox are bound in under /tmp (pytest's tmp dirs), nothing else of the host
    assert "mine" in seen["tmp"]
    assert not (Path("/tmp") / "mine").exists()
    assert seen["host_tmp_file"] is False
    assert seen["home"] == str(spec.sandbox.home)  # a HOME pointing at the real home is replaced
    assert ".gitconfig" not in seen["real_home_visible"]


def test_child_sees_only_its_own_processes(layout):
    spec = spec_for(layout)
    proc = run_confined(spec, "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert proc.returncode == 0, proc.stderr
    pids = json.loads(proc.stdout)
    assert pids == [1, 2], pids  # bwrap's init and the worker: no process of the host


def test_host_sockets_under_run_are_hidden(layout):
    spec = spec_for(layout)
    proc = run_confined(spec, "import os; print(sorted(os.listdir('/run')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout  # no D-Bus, docker or database sockets
    proc = run_confined(spec, "print(open('/etc/resolv.conf').read() != '')")
    assert proc.stdout.strip() == "True", proc.stderr


def test_no_capabilities_even_as_root(layout):
    spec = spec_for(layout)
    proc = run_confined(spec, "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1] == "0000000000000000"
    # each command must run and be refused (a missing program would also give a non-zero code)
    proc = run_confined(spec, "import subprocess; r = subprocess.run(['mount', '-o', 'remount,rw', '/'],"
                              " capture_output=True, text=True); print(r.returncode, r.stderr)")
    code, _, err = proc.stdout.partition(" ")
    assert code == "32" and "permission denied" in err, proc.stdout + proc.stderr
    # and no way to get capabilities back through a nested user namespace: bwrap >= 0.8 has
    # --disable-userns, and confinement must use it (an older bwrap fails this test, never skips it)
    helptext = subprocess.run([confine.bwrap_path() or "bwrap", "--help"], capture_output=True, text=True)
    assert "--disable-userns" in helptext.stdout + helptext.stderr, "this bwrap is older than 0.8"
    assert "--disable-userns" in confine.wrap(LaunchSpec(argv=["true"], env={}, cwd=spec.workdir), spec).argv
    proc = run_confined(spec, "import subprocess; r = subprocess.run(['unshare', '-U', 'true'],"
                              " capture_output=True, text=True); print(r.returncode, r.stderr)")
    code, _, err = proc.stdout.partition(" ")
    assert code == "1" and "unshare failed" in err, proc.stdout + proc.stderr


def test_child_dies_with_its_parent(layout, tmp_path):
    spec = spec_for(layout)
    marker = f"pilothouse-orphan-{os.getpid()}-{time.time_ns()}"
    launch = LaunchSpec(argv=["/bin/sh", "-c", f"exec -a {marker} sleep 300"], env={"PATH": "/usr/bin:/bin"},
                        cwd=spec.workdir)
    wrapped = confine.wrap(launch, spec)
    parent_code = ("import subprocess, sys, json, time\n"
                   f"p = subprocess.Popen({wrapped.argv!r}, env={wrapped.env!r})\n"
                   "print(p.pid, flush=True)\n"
                   "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    bwrap_pid = int(parent.stdout.readline())

    def sleeper_alive() -> bool:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return True
                except OSError:
                    pass
        return False

    until(sleeper_alive, "the confined child started", every=0.02)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    until(lambda: not sleeper_alive(), "the confined child ended with its parent")
    assert not Path(f"/proc/{bwrap_pid}").exists() or b"Z" in Path(f"/proc/{bwrap_pid}/stat").read_bytes()


def test_credential_is_readable_but_the_key_store_is_not(layout):
    from pilothouse.providers import keys

    keys.set_key("sim", "sk-sim-own-key-0000000000", use_backend="file")
    keys.set_key("glm", "sk-glm-other-key-1111111111", use_backend="file")
    spec = spec_for(layout)
    cred = spec.sandbox.root / "credential"
    cred.symlink_to(keys.key_file("sim"))
    spec.sandbox.credential = cred
    code = ("import os,sys\n"
            "print(open(sys.argv[1]).read().strip())\n"
            "try:\n    print(open(sys.argv[2]).read())\nexcept OSError as e:\n    print('blocked', e.errno)\n")
    proc = run_confined(spec, code, str(cred), str(keys.key_file("glm")))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "sk-sim-own-key-0000000000"
    assert lines[1].startswith("blocked")
    assert "sk-glm-other-key" not in proc.stdout


def test_prepare_policy(layout, monkeypatch):
    spec = spec_for(layout)
    launch = LaunchSpec(argv=[sys.executable, "-c", "pass"], env={"PATH": "/usr/bin:/bin"}, cwd=spec.workdir)
    wrapped = confine.prepare(launch, spec)
    assert Path(wrapped.argv[0]).name == "bwrap" and wrapped.argv[-3:] == launch.argv
    assert "--die-with-parent" in wrapped.argv and "--unshare-pid" in wrapped.argv
    assert "--unshare-net" not in wrapped.argv  # the sim/API needs the network
    # a project that opts out runs unconfined
    off = spec_for(layout)
    off.extra["confinement"] = "off"
    assert confine.prepare(launch, off) is launch
    # without a working bwrap: writers refused with the fix, read-only modes run unconfined
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(layout["base"] / "no-such-bwrap"))
    assert confine.available()[0] is False
    with pytest.raises(UserError) as err:
        confine.prepare(launch, spec)
    assert "bubblewrap" in str(err.value) and "confinement: off" in str(err.value)
    assert confine.prepare(launch, spec_for(layout, "explore")) is launch
    assert confine.prepare(launch, off) is launch
    st = confine.status("off")
    assert st["mode"] == "off" and st["available"] is False and "bubblewrap" in st["reason"]


def test_writer_workdir_may_not_contain_home(layout, isolated_home):
    spec = probe_spec(layout["base"] / "sb", isolated_home.parent)
    with pytest.raises(UserError, match="own worktree"):
        confine.wrap(LaunchSpec(argv=["true"], env={}, cwd=isolated_home.parent), spec)


def test_writer_script_is_what_the_probe_runs():
    assert "open(path, \"w\")" in WRITER


def abort_when_ready(spec: RunSpec) -> tuple[list[str], Any]:
    """Run a TERM-trapping shell confined by `spec`, abort it once it is ready; its stdout lines and outcome."""
    import threading

    from pilothouse.core.dispatch.process import WorkerProcess

    script = 'trap "echo got-TERM; exit 3" TERM; echo ready; sleep 300 & wait'
    launch = LaunchSpec(argv=["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, cwd=spec.workdir)
    worker = WorkerProcess(confine.wrap(launch, spec))
    lines: list[str] = []

    def on_stdout(line: str) -> None:
        lines.append(line)
        if line == "ready":
            threading.Thread(target=worker.request_abort, args=("interrupted",)).start()

    return lines, worker.watch(on_stdout, lambda _b: None, timeout_s=60, idle_timeout_s=60)


def test_abort_reaches_the_confined_worker_gracefully(layout):
    """dispatch's SIGTERM (abort, timeout) reaches the worker inside bwrap, which does not forward it."""
    lines, outcome = abort_when_ready(spec_for(layout))
    assert lines == ["ready", "got-TERM"], lines
    assert outcome.interrupted and outcome.exit_code == 3


def test_status_reads_the_project_opt_out(git_repo, monkeypatch):
    require_confinement()
    (git_repo / ".ai").mkdir()
    (git_repo / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\nconfinement: off\n")
    monkeypatch.chdir(git_repo / "src")
    st = confine.status()
    assert st["mode"] == "off" and "confinement: off" in st["reason"]
    (git_repo / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\nconfinement: on\n")
    assert confine.status()["mode"] == "bwrap"


def test_gate_command_runs_confined(layout, isolated_home):
    """A gate runs worker-written code (tests, conftest.py): it gets the worker's confinement."""
    (layout["own"] / "conftest_like.py").write_text(
        f"import pathlib\ntry:\n    pathlib.Path({str(isolated_home / 'gate-pwned')!r}).write_text('x')\n"
        "    print('escaped')\nexcept OSError as e:\n    print('blocked', e.errno)\n"
        "pathlib.Path('gate-ok.txt').write_text('ok')\n")
    scratch = paths.cache_dir() / "gates" / "g1"
    launch = confine.prepare_command([sys.executable, "-I", "conftest_like.py"], {"PATH": "/usr/bin:/bin"},
                                     layout["own"], scratch)
    proc = subprocess.run(launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=guard(60))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("blocked")
    assert not (isolated_home / "gate-pwned").exists()
    assert (layout["own"] / "gate-ok.txt").read_text() == "ok"
    off = confine.prepare_command(["true"], {}, layout["own"], scratch, settings={"confinement": "off"})
    assert off.argv == ["true"]


@pytest.mark.parametrize("mode", ["code", "resume", "test"])
def test_every_writer_is_refused_without_a_working_bwrap(layout, monkeypatch, mode):
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(layout["base"] / "no-such-bwrap"))
    launch = LaunchSpec(argv=[sys.executable, "-c", "pass"], env={"PATH": "/usr/bin:/bin"}, cwd=layout["own"])
    with pytest.raises(UserError) as err:
        confine.prepare(launch, spec_for(layout, mode))
    assert str(err.value) == (
        f"refusing to run a {mode} task unconfined: bubblewrap (bwrap) is not installed: {confine.INSTALL_FIX} "
        "(or set `confinement: off` in .ai/project.yaml to accept the risk)")


@pytest.mark.parametrize("scratch", [False, True])
def test_a_gate_is_refused_without_a_working_bwrap(layout, monkeypatch, scratch):
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(layout["base"] / "no-such-bwrap"))
    where = paths.cache_dir() / "gates" / "g2" if scratch else None
    with pytest.raises(UserError, match=r"^refusing to run a test task unconfined: bubblewrap"):
        confine.prepare_command([sys.executable, "-I", "-c", "pass"], {"PATH": "/usr/bin:/bin"}, layout["own"],
                                where)
    # only the project's explicit opt-out runs it unconfined
    off = confine.prepare_command(["true"], {"PATH": "/usr/bin:/bin"}, layout["own"], where,
                                  settings={"confinement": "off"})
    assert off.argv == ["true"]


def test_a_worktrees_settings_are_read_from_its_main_checkout(layout):
    """A linked worktree's .git file leads (gitdir, commondir) to the main checkout, whose settings a
    worker cannot edit; the main checkout is its own root."""
    main = layout["main"].resolve()
    assert confine.trusted_project_root(layout["own"]) == main
    assert confine.trusted_project_root(layout["own"] / "src") == main
    assert confine.trusted_project_root(layout["main"] / "src") == main


def _failing_bwrap(where: Path) -> Path:
    """A bwrap that answers --version and --help but can build no sandbox."""
    fake = where / "bwrap"
    fake.write_text('#!/bin/sh\ncase "$1" in --version) echo "bubblewrap 0.0.1";; --help) echo usage;; '
                    '*) echo "bwrap: setting up uid map: Permission denied" >&2; exit 1;; esac\n')
    fake.chmod(0o755)
    return fake


def test_a_passed_probe_of_this_very_binary_is_trusted_and_no_other(tmp_path, monkeypatch):
    from pilothouse.providers.fsutil import atomic_write_json

    fake = _failing_bwrap(tmp_path)
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(fake))
    st = fake.stat()
    ok, reason = confine.available()
    assert not ok and reason.startswith("bwrap cannot create a sandbox here (bwrap: setting up uid map: "
                                        "Permission denied); ")
    # the probe passed with this binary (same path, mtime and size): its word stands
    record = {"schema": 1, "ok": True, "bwrap": {"path": str(fake), "stat": [st.st_mtime_ns, st.st_size],
                                                 "version": "0.0.1", "disable_userns": True}}
    atomic_write_json(paths.config_dir() / "probe.json", record)
    assert confine.available() == (True, "")
    # a record of another build of it (a later mtime) is not this binary's
    record["bwrap"]["stat"] = [st.st_mtime_ns + 1, st.st_size]
    atomic_write_json(paths.config_dir() / "probe.json", record)
    assert not confine.available()[0]


def test_a_passed_smoke_test_is_remembered_while_its_key_holds(tmp_path, monkeypatch):
    from pilothouse.providers.confine import bwrap
    from pilothouse.providers.fsutil import atomic_write_json

    fake = _failing_bwrap(tmp_path)
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(fake))
    st = fake.stat()
    key = bwrap._smoke_key(str(fake), (st.st_mtime_ns, st.st_size))
    atomic_write_json(paths.cache_dir() / "bwrap-check.json", {"key": key, "version": "0.0.1", "disable_userns": False})
    assert confine.available() == (True, "")


def test_a_write_beside_what_is_bound_under_tmp_is_refused_not_swallowed(layout):
    """The main checkout lives under /tmp here: the folders that lead to it inside the sandbox's private
    /tmp are read-only stand-ins, so a write there fails as it would on the host, never landing
    unseen in the private /tmp."""
    main = layout["main"]
    assert main.is_relative_to("/tmp")
    beside = main.parent / "beside.txt"
    code = ("import sys\ntry:\n    open(sys.argv[1], 'w').write('x')\n    print('WROTE')\n"
            "except PermissionError:\n    print('REFUSED')\n")
    out = run_confined(spec_for(layout), code, str(beside))
    assert out.stdout.strip() == "REFUSED", out.stdout + out.stderr
    assert not beside.exists()
