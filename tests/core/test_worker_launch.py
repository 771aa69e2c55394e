"""How the supervisor starts a dispatch: below its own CPU priority, with a pipe that says
"verdict written" the moment it is on disk (before the dispatch has wound down)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.core.dispatch import priority as cpu_priority
from pilothouse.core.dispatch import runs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.supervisor.wake import Waker
from support import guard, until


def _nice_of(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2:].split()[16])  # field 19


def _autogroup_nice(pid: int) -> int | None:
    """None when there is no autogroup: no /proc file, or an empty one (the task is in a cgroup)."""
    try:
        words = Path(f"/proc/{pid}/autogroup").read_text().split()
        return int(words[-1]) if words else None
    except (OSError, ValueError):
        return None


def _autogroups_settable() -> bool:
    """Autogroups exist and we may set their nice (as root: no rate limit; a container may forbid it)."""
    if os.geteuid() != 0:
        return False
    current = _autogroup_nice(os.getpid())
    if current is None:
        return False
    try:
        Path("/proc/self/autogroup").write_text(str(current))
    except OSError:
        return False
    return True


def _launch(layout: RepoLayout, repo: Path, run_id: str) -> runs.Launch:
    launch = runs.Launch(run_id=run_id, job=None, task=None, role="builder", provider="sim", mode="explore",
                         workdir=str(repo), task_text="Explain src/calc.py.\n")
    runs.write_spec(layout, launch)
    return launch


def test_dispatch_runs_niced_and_says_when_its_verdict_is_written(git_repo: Path) -> None:
    layout = RepoLayout(git_repo)
    launch = _launch(layout, git_repo, "notify-1")
    r, w = os.pipe()
    try:
        proc = runs.spawn(layout, launch, nice=7, notify_fd=w)
    finally:
        os.close(w)
    try:
        assert _nice_of(proc.pid) == 7  # inherited by the runner and everything it starts
        if _autogroups_settable():
            assert _autogroup_nice(proc.pid) == 7  # its session's scheduling group too
        ready, _, _ = select.select([r], [], [], 60)
        assert ready, "the dispatch never wrote to its verdict pipe"
        assert os.read(r, 64) == b"v"
        # the byte comes after the verdict is on disk, so reading it then must find it
        verdict = runs.read_verdict(layout, launch.run_id, "sim")
        assert verdict is not None and verdict["verdict"] == "completed"
        assert proc.wait(timeout=guard(60)) == 0
        assert os.read(r, 64) == b""  # EOF: the dispatch was the only writer
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()


def test_worker_session_inherits_the_dispatch_priority() -> None:
    """A dispatch starts its worker in a session of its own: that session must not run above it."""
    code = ("import os, subprocess, sys\n"
            "from pilothouse.core.dispatch import priority as cpu_priority\n"
            "os.setpriority(os.PRIO_PROCESS, 0, 5)\n"
            "p = subprocess.Popen(['sleep', '5'], start_new_session=True)\n"
            "cpu_priority.set_session(p.pid, cpu_priority.own_nice())\n"
            "print(p.pid, flush=True)\n"
            "sys.stdin.read()\n"
            "p.kill()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _nice_of(child) == 5
        if _autogroups_settable():
            assert _autogroup_nice(child) == 5
    finally:
        parent.communicate("", timeout=guard(10))


def test_nice_zero_changes_nothing() -> None:
    p = subprocess.Popen(["sleep", "5"], start_new_session=True)
    try:
        before = _nice_of(p.pid)
        cpu_priority.lower(p.pid, 0)
        assert _nice_of(p.pid) == before
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("payload", [b"v", b""])
def test_waker_reports_a_verdict_and_forgets_a_closed_pipe(payload: bytes) -> None:
    waker = Waker()
    r, w = os.pipe()
    waker.watch_verdict("run-1", r)
    if payload:
        os.write(w, payload)
    os.close(w)
    items: list = []

    def unregistered() -> bool:
        items.extend(waker.wait(1.0)[1])
        return "run-1" not in waker._notify

    until(unregistered, "the pipe's end unregistered it")
    assert ("verdict", "run-1") in items if payload else items == []
    assert "run-1" not in waker._notify  # EOF unregistered and closed it
    waker.unwatch_pid("run-1")  # nothing left to forget: no error


def _confined(git_repo: Path, code: str, **popen: object) -> subprocess.Popen[str]:
    from pilothouse.providers import confine

    ok, reason = confine.available()
    assert ok, f"confinement is not available on this machine: {reason}"
    launch = confine.prepare_command([sys.executable, "-I", "-c", code], {"PATH": "/usr/bin:/bin"}, git_repo)
    # as every launcher does (dispatch_proc, gates, probe): a session of its own, no controlling tty
    return subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)  # type: ignore[call-overload]


def test_everything_in_a_sandbox_shares_the_lowered_priority_of_its_session(git_repo: Path) -> None:
    """bwrap starts no session of its own (which would be a fresh scheduling group at nice 0)."""
    proc = _confined(git_repo, "import os, time; time.sleep(0.3); "
                               "print(os.getsid(0) == os.getsid(1), open('/proc/self/autogroup').read())")
    cpu_priority.set_session(proc.pid, 6)
    out, _ = proc.communicate(timeout=guard(60))
    same_session, autogroup = out.split(" ", 1)
    assert same_session == "True"  # the command is in the session bwrap was started in
    if _autogroups_settable():
        assert autogroup.split()[-1] == "6"


def test_a_confined_command_cannot_type_into_a_terminal(git_repo: Path) -> None:
    """What bwrap's --new-session guarded against: TIOCSTI into the terminal it was started from.
    Started in a session of its own, the sandbox has no controlling terminal: even a terminal on its
    stdin refuses the injection, and /dev/tty does not open."""
    import pty

    code = ("import fcntl, termios, os\n"
            "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected', end=' ')\n"
            "except OSError as e:\n    print('refused', end=' ')\n"
            "try:\n    os.open('/dev/tty', os.O_RDWR); print('tty')\n"
            "except OSError:\n    print('no-tty')\n")
    leader, follower = pty.openpty()
    try:
        proc = _confined(git_repo, code, stdin=follower)
        out, _ = proc.communicate(timeout=guard(60))
    finally:
        os.close(follower)
        os.close(leader)
    assert out.split() == ["refused", "no-tty"]


def test_a_recorded_launch_is_spawned_even_if_project_yaml_broke_just_now(git_repo: Path) -> None:
    """The run is recorded before it is spawned; reading worker_nice at that moment must not leave a
    recorded run that nobody started or watches (an editor's half-written save of project.yaml)."""
    from pilothouse.core.repo_setup import init_project
    from pilothouse.core.supervisor import launch as supervisor_launch
    from pilothouse.core.supervisor.loop import Supervisor

    init_project(git_repo, {"fast": "true", "full": "true"}, stdin_is_tty=False)
    layout = RepoLayout(git_repo)
    sup = Supervisor(layout)
    try:
        assert sup.project.worker_nice == 19  # loaded, as reconcile does before it launches
        layout.project_yaml.write_text("max_workers: [\n")
        os.utime(layout.project_yaml, (1, 1))
        sup._passes += 1  # a new reconcile pass: the settings are looked at again
        launch = runs.Launch(run_id="r-1", job=None, task=None, role="assigner", provider="sim", mode="explore",
                             workdir=str(git_repo), task_text="Explain src/calc.py.\n")
        supervisor_launch.start(sup, launch)
        assert "r-1" in sup.live_runs()
        assert _nice_of(sup.children["r-1"].pid) == 19  # the last good setting
        assert sup.children["r-1"].wait(timeout=guard(60)) == 0
    finally:
        sup.conn.close()


def test_a_run_without_verdict_says_the_dispatch_last_words(git_repo: Path) -> None:
    """Why a dispatch died shows in the task's reason, not only in its .err file."""
    layout = RepoLayout(git_repo)
    err = runs.run_files(layout, "crash-1")["err"]
    err.parent.mkdir(parents=True, exist_ok=True)
    err.write_text("starting\npilothouse: scenario file /tmp/nope.yaml not found (give a bundled name)\n\n")
    row = {"run_id": "crash-1", "provider": "sim", "mode": "code"}
    v = runs.synth_verdict(layout, row, "the dispatch exited without a verdict")  # type: ignore[arg-type]
    assert v["error"] == ("the dispatch exited without a verdict: pilothouse: scenario file /tmp/nope.yaml "
                          "not found (give a bundled name)")
    assert runs.synth_verdict(layout, {**row, "run_id": "crash-2"}, "gone")["error"] == "gone"  # type: ignore[arg-type]


def test_a_spawned_dispatch_is_handed_the_settings_the_supervisor_read(git_repo: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor reads project.yaml once per edit and hands each dispatch the result, so a
    dispatch neither parses YAML nor imports pydantic at its start."""
    from pilothouse.core.dispatch.prepare import _project_settings

    layout = RepoLayout(git_repo)
    layout.ai.mkdir(parents=True, exist_ok=True)
    layout.project_yaml.write_text("network: none\nsandbox:\n  read: [/opt]\n")
    first = runs.settings_file(layout)
    assert json.loads(first.read_text()) == _project_settings(git_repo)
    assert json.loads(first.read_text())["network"] == "none"
    assert runs.settings_file(layout) == first  # unchanged file: not read again
    layout.project_yaml.write_text("network: default\n")
    second = runs.settings_file(layout)
    assert second != first and json.loads(second.read_text())["network"] == "default"

    # the spawned process asks for its settings the way dispatch does, from a worktree-like cwd
    code = ("import json, os, sys; from pilothouse.core.dispatch.prepare import _project_settings; "
            "print(json.dumps([_project_settings(os.getcwd()), 'pydantic' in sys.modules, 'yaml' in sys.modules]))")
    monkeypatch.setattr(runs, "dispatch_argv", lambda *_a, **_k: [sys.executable, "-I", "-c", code])
    launch = _launch(layout, git_repo, "settings-1")
    proc = runs.spawn(layout, launch)
    assert proc.wait(timeout=guard(60)) == 0
    seen = json.loads(runs.run_files(layout, launch.run_id)["out"].read_text())
    assert seen == [json.loads(second.read_text()), False, False]
