"""The confinement policy on real processes: the project's opt-out as status and gates read it, a
runner binary that no longer starts confined refused before a writer runs, a gate's HOME and
rustup dirs, and a TERM that reaches the worker inside bwrap but nothing outside a sandbox.

These tests FAIL (never skip) when bwrap cannot build a sandbox here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine import probe
from pilothouse.providers.confine.policy import GATE_SANDBOX
from pilothouse.providers.confine.probe import probe_spec
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec
from support import guard

PATH = "/usr/bin:/bin"


def require_confinement() -> None:
    ok, reason = confine.available()
    assert ok, f"confinement is not available on this machine: {reason}"


def run(launch: LaunchSpec) -> subprocess.CompletedProcess[str]:
    return subprocess.run(launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True,
                          timeout=guard(60), stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.parametrize(("setting", "mode"), [("off", "off"), ("OFF", "off"), ("Off", "off"), ("on", "bwrap")])
def test_status_shows_the_projects_opt_out_however_it_is_spelt(setting: str, mode: str) -> None:
    require_confinement()
    st = confine.status(setting)
    assert st["mode"] == mode and st["available"] is True
    assert ("`confinement: off`" in st["reason"]) == (mode == "off"), st


@pytest.mark.parametrize("setting", [None, "", "on", "ON", "off", "Off", "false", "no"])
def test_without_a_working_bwrap_only_a_project_that_opted_out_is_spared_the_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None) -> None:
    # no setting at all (the demo asks with none, a project's default is "on") is no opt-out
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(tmp_path / "no-such-bwrap"))
    reason = confine.unconfined_reason(setting)
    if str(setting).lower() in ("off", "false", "no"):
        assert reason is None
    else:
        assert reason is not None and reason.startswith("bubblewrap (bwrap) is not installed"), reason


@pytest.mark.parametrize("named", ["by its path", "by its name on the launch's PATH"])
def test_a_writer_whose_runner_binary_no_longer_starts_confined_is_refused(tmp_path: Path, named: str) -> None:
    """The probe vouched for the runner's binary; it changed since and fails confined: the writer's
    launch (its program is argv[0], found on the launch's own PATH) is refused before it runs."""
    require_confinement()
    bin_dir = tmp_path / "runner-bin"
    bin_dir.mkdir()
    exe = bin_dir / "fake-cli"
    exe.write_text("#!/bin/sh\necho fake-cli 1.0\n")
    exe.chmod(0o755)
    record = probe.ensure_probed(str(exe))
    record["binaries"][os.path.realpath(exe)] = probe.binary_check(str(exe), tmp_path / "b1")
    assert record["binaries"][os.path.realpath(exe)]["pass"], record["binaries"]
    probe.atomic_write_json(probe.record_path(), record)
    exe.write_text("#!/bin/sh\necho 'fake-cli: cannot start here' >&2\nexit 3\n")

    wd = tmp_path / "wt"
    wd.mkdir()
    program, path = (str(exe), PATH) if named == "by its path" else ("fake-cli", f"{bin_dir}:{PATH}")
    launch = LaunchSpec(argv=[program, "--json", "--task", "t"], env={"PATH": path}, cwd=wd)
    with pytest.raises(UserError) as err:
        confine.prepare(launch, probe_spec(tmp_path / "sb", wd, mode="code"))
    assert str(err.value) == (f"refusing to launch a writer: {os.path.realpath(exe)} does not start confined: "
                              "fake-cli: cannot start here; see `pilothouse probe`")


def test_a_gate_runs_again_in_the_scratch_folder_its_last_run_left(git_repo: Path) -> None:
    require_confinement()
    scratch = paths.cache_dir() / "gates" / "again"
    script = 'echo run >> "$HOME/runs" && wc -l < "$HOME/runs"'
    for n in (1, 2):
        launch = confine.prepare_command(["/bin/sh", "-c", script], {"PATH": PATH}, git_repo, scratch)
        proc = run(launch)
        assert (proc.returncode, proc.stdout.strip()) == (0, str(n)), proc.stderr
    assert (scratch / "home" / "runs").read_text() == "run\nrun\n"


@pytest.mark.parametrize("scratch", [False, True])
def test_an_opted_out_gate_keeps_its_home_unless_it_was_given_a_scratch_one(git_repo: Path, isolated_home: Path,
                                                                             scratch: bool) -> None:
    """`confinement: off`: the gate runs unconfined; with a scratch folder it still gets the HOME and
    XDG dirs made there, without one it runs with the env it was given (GATE_SANDBOX exists only
    inside a sandbox)."""
    where = paths.cache_dir() / "gates" / "off" if scratch else None
    env = {"PATH": PATH, "HOME": str(isolated_home)}
    launch = confine.prepare_command(["/bin/sh", "-c", 'echo "$HOME|${XDG_CACHE_HOME-unset}"'], env, git_repo,
                                     where, settings={"confinement": "off"})
    assert launch.argv[0] == "/bin/sh"
    proc = run(launch)
    assert proc.returncode == 0, proc.stderr
    if where is not None:
        assert proc.stdout.strip() == f"{where / 'home'}|{where / 'cache'}"
        assert (where / "home").is_dir()
    else:
        assert proc.stdout.strip() == f"{isolated_home}|unset"
    assert not GATE_SANDBOX.exists()


RUST_CASES = {
    # rustup's proxy on PATH and its toolchains in the home: the gate is told where they are, and
    # gets a cargo home of its own
    "rustup proxy": ({}, True, True, ("{rustup}", f"{GATE_SANDBOX}/home/.cargo")),
    "operator's CARGO_HOME": ({"CARGO_HOME": "/opt/cargo"}, True, True, ("{rustup}", "/opt/cargo")),
    "operator's RUSTUP_HOME": ({"RUSTUP_HOME": "/opt/rustup"}, True, True, ("/opt/rustup", "unset")),
    "no ~/.rustup": ({}, True, False, ("unset", "unset")),
    "cargo not on PATH": ({}, False, True, ("unset", "unset")),
}


@pytest.mark.parametrize("case", sorted(RUST_CASES))
def test_a_gate_finds_rustups_toolchains_only_where_its_proxy_needs_them(tmp_path: Path, isolated_home: Path,
                                                                        case: str) -> None:
    require_confinement()
    extra, on_path, has_rustup, (rustup_home, cargo_home) = RUST_CASES[case]
    (isolated_home / ".cargo" / "bin").mkdir(parents=True)
    if has_rustup:
        (isolated_home / ".rustup" / "toolchains").mkdir(parents=True)
    path = f"{isolated_home}/.cargo/bin:{PATH}" if on_path else PATH
    env = {"HOME": str(isolated_home), "PATH": path, **extra}
    wd = tmp_path / "wt"
    wd.mkdir()
    launch = confine.prepare_command(["/bin/sh", "-c", 'echo "${RUSTUP_HOME-unset}|${CARGO_HOME-unset}"'], env, wd)
    proc = run(launch)
    assert proc.returncode == 0, proc.stderr
    want = f"{rustup_home.format(rustup=isolated_home / '.rustup')}|{cargo_home}"
    assert proc.stdout.strip() == want


@pytest.mark.parametrize("network", ["host", "none"])
def test_a_term_for_a_sandbox_reaches_the_worker_inside_it(tmp_path: Path, network: str) -> None:
    """bwrap forwards no signal: signal_sandbox finds the worker below bwrap (and below the net relay
    that runs bwrap under `network: none`) and the worker's TERM trap runs."""
    require_confinement()
    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(tmp_path / "sb", wd)
    if network == "none":
        # an unprivileged port (the sandbox has no capability to listen below 1024); nothing needs to answer
        spec.base_url, spec.extra["network"] = "http://127.0.0.1:18080/v1", "none"
    script = 'trap "echo got-TERM; exit 3" TERM; echo ready; sleep 300 & wait'
    launch = confine.wrap(LaunchSpec(argv=["/bin/sh", "-c", script], env={"PATH": PATH}, cwd=wd), spec)
    proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        assert confine.signal_sandbox(proc.pid, signal.SIGTERM) is True
        assert proc.stdout.readline() == "got-TERM\n"
        assert proc.wait(timeout=guard(60)) == 3
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_a_term_for_a_process_that_is_no_sandbox_is_left_to_the_caller(tmp_path: Path) -> None:
    """Neither the process nor any child of it is bwrap: nothing is signalled and the caller is told
    so, whatever the children are called (names sorting before and after "bwrap")."""
    helpers = []
    for name in ("aa-helper", "zz-helper"):
        (tmp_path / name).symlink_to(shutil.which("sh") or "/bin/sh")
        helpers.append(f"{tmp_path / name} -c 'sleep 300 & echo up; wait' &")
    outer = subprocess.Popen(["/bin/sh", "-c", " ".join(helpers) + " wait"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert outer.stdout is not None
        assert [outer.stdout.readline(), outer.stdout.readline()] == ["up\n", "up\n"]
        assert confine.signal_sandbox(outer.pid, signal.SIGTERM) is False
        assert outer.poll() is None
    finally:
        os.killpg(outer.pid, signal.SIGKILL)
        outer.communicate()
