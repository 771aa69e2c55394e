"""A real builder (builtin runner on the sim) under confinement, through `pilothouse dispatch`.

Scripted to escape (tools and bash, into another worktree, the main checkout, its .git, the real
home, /root): every outside write fails and is counted as a permission denial in the verdict, the
worktree write succeeds, and nothing appears outside. The canary-key test watches every process
of a whole dispatch (argv and environment) and greps everything it wrote.
FAILS (does not skip) when bwrap cannot confine here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pilothouse.providers import confine, keys, paths
from support import git, guard
from test_confine import require_confinement
from test_runner_common import require_cli

SCENARIOS = Path(__file__).parent / "scenarios"
CANARY = "sk-canary-7f3e9d1c2b4a5968"


@pytest.fixture
def worktrees(git_repo: Path) -> dict[str, Path]:
    require_confinement()
    root = paths.data_dir() / "worktrees" / "repo-escape" / "job"
    own, other = root / "own", root / "other"
    git(git_repo, "worktree", "add", "-q", "-b", "own", str(own))
    git(git_repo, "worktree", "add", "-q", "-b", "other", str(other))
    return {"main": git_repo, "own": own, "other": other}


def escape_scenario(tmp_path: Path, wt: dict[str, Path], home: Path) -> Path:
    text = (SCENARIOS / "escape.yaml").read_text()
    text = text.replace("@HOME@", str(home)).replace("@OTHER@", str(wt["other"])).replace("@MAIN@", str(wt["main"]))
    p = tmp_path / "escape.yaml"
    p.write_text(text)
    return p


def dispatch_args(workdir: Path, scenario: Path | str, task: Path, run_id: str, provider: str = "sim") -> list[str]:
    return ["dispatch", "--provider", provider, "--mode", "code", "--workdir", str(workdir), "--task-file",
            str(task), "--scenario", str(scenario), "--run-id", run_id, "--timeout", "900"]


def snapshot(*roots: Path) -> dict[str, bytes]:
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = p.read_bytes()
    return out


def run_escape(cli, worktrees: dict[str, Path], home: Path, tmp_path: Path, run_id: str,
               provider: str = "sim", timeout: float = 60) -> tuple[list[dict], dict]:
    """Dispatch the escape scenario; assert it completed, the legit write landed in the worktree and
    nothing changed outside (other worktree, main checkout and its .git, the real home, /root, /tmp)."""
    scen = escape_scenario(tmp_path, worktrees, home)
    task = tmp_path / "task.md"
    task.write_text("Add src/legit.py.\n")
    watched = (worktrees["main"], worktrees["other"], home)
    before = snapshot(*watched)
    r = cli(*dispatch_args(worktrees["own"], scen, task, run_id, provider=provider), timeout=timeout)
    out = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(out) == 2, r.stdout + r.stderr
    v = out[1]
    assert v["verdict"] == "completed", v
    assert (worktrees["own"] / "src" / "legit.py").read_text() == "VALUE = 1\n"
    after = snapshot(*watched)
    assert after == before, sorted(set(after) ^ set(before))
    assert not Path("/root/pilothouse-escape-x").exists() and not Path("/tmp/hooked").exists()
    return out, v


def test_builder_escapes_fail_and_are_counted(cli, worktrees, isolated_home, tmp_path):
    out, v = run_escape(cli, worktrees, isolated_home, tmp_path, "escape-1")
    assert not (isolated_home / "pwned").exists() and not (isolated_home / "escape.txt").exists()
    # every outside write is a permission denial: 2 tool writes + 5 shell writes (~ is the sandbox home)
    assert v["tool_errors"]["permission_denied"] == 7, v["tool_errors"]
    events = [json.loads(x) for x in Path(out[0]["log"]).read_text().splitlines()]
    tools = [e for e in events if e.get("kind") == "tool"]
    statuses = [e.get("status") for e in tools if e.get("status") in {"ok", "denied", "error"}]
    assert statuses.count("denied") == 7 and statuses.count("ok") >= 2, tools
    # `echo > ~/pwned` went to the run's sandbox home, which is the worker's HOME
    sandbox_home = paths.providers_dir() / "sim" / "runs" / "escape-1" / "home"
    assert (sandbox_home / "pwned").read_text() == "pwned\n"


def _descendants(pid: int) -> list[int]:
    children = confine.policy._children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


@pytest.mark.parametrize("provider", ["sim", pytest.param("sim-opencode", marks=pytest.mark.realcli)])
def test_canary_key_in_no_argv_environ_log_event_report_or_verdict(worktrees, tmp_path, provider):
    if provider != "sim":
        require_cli(provider.removeprefix("sim-"))  # fails, never skips, when it is missing
    keys.set_key(provider, CANARY, use_backend="file")
    scen = tmp_path / "canary.yaml"
    scen.write_text(
        "name: canary\ndescription: a builder that dumps its environment and lingers\nscripts:\n"
        "  - match: {mode: code}\n    turns:\n"
        "      - say: looking around\n        actions:\n"
        "          - bash: {command: \"env; tr '\\\\0' '\\\\n' < /proc/self/environ; ps -ef || true\"}\n"
        "      - say: waiting\n        actions:\n          - bash: {command: \"sleep 1.5\"}\n"
        "      - say: writing\n        actions:\n          - write: {path: src/c.py, content: \"C = 1\\n\"}\n"
        "      - say: |\n          done\n          <!--RESULT-->{\"status\":\"complete\",\"files_changed\":[\"src/c.py\"],"
        "\"validation\":{\"commands\":[],\"passed\":true},\"risks\":[]}<!--/RESULT-->\n")
    task = tmp_path / "task.md"
    task.write_text("Add src/c.py.\n")
    args = dispatch_args(worktrees["own"], scen, task, "canary-1", provider=provider)
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    seen: dict[int, tuple[bytes, bytes]] = {}
    saw_bwrap = False
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            seen[pid] = (cmdline, environ)
            saw_bwrap = saw_bwrap or cmdline.split(b"\0")[0].endswith(b"bwrap")
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    verdict = json.loads(stdout.splitlines()[-1])
    assert verdict["verdict"] == "completed", verdict
    assert saw_bwrap, "the worker was not launched under bwrap"
    assert len(seen) >= 3
    key = CANARY.encode()
    for pid, (cmdline, environ) in seen.items():
        assert key not in cmdline, f"key in argv of pid {pid}"
        assert key not in environ, f"key in environment of pid {pid}"
    assert key not in stdout and key not in stderr
    # every byte pilothouse wrote: logs, events, report, verdict, latest.log, the sandbox (but its credential)
    leaked = []
    for root in (paths.logs_dir(), paths.providers_dir(), worktrees["own"]):
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink() and p.name != "credential" and key in p.read_bytes():
                leaked.append(str(p))
    assert not leaked, leaked
    assert (worktrees["own"] / "src" / "c.py").exists()


@pytest.mark.realcli
def test_opencode_builder_escapes_fail_nothing_appears_outside(cli, worktrees, isolated_home, tmp_path):
    """The same escape attempts through the real opencode binary (helper E's runner) on the sim."""
    require_cli("opencode")
    _, v = run_escape(cli, worktrees, isolated_home, tmp_path, "oc-escape-1", provider="sim-opencode", timeout=240)
    # opencode's own rules refuse the 2 tool writes and 2 shell commands naming outside paths; the
    # 3 shell writes it lets through fail in the kernel (EROFS/EACCES) but opencode reports the bash
    # call itself as completed, so they are not (yet) counted: see /work/team/NOTES_F_for_E.md
    assert v["tool_errors"]["permission_denied"] >= 4, v["tool_errors"]


def test_worker_cannot_switch_off_its_own_confinement(cli, worktrees, tmp_path):
    """`confinement: off` written into a worktree's .ai/project.yaml (by its worker) is not obeyed;
    the main checkout's setting is."""
    (worktrees["own"] / ".ai").mkdir()
    (worktrees["own"] / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\nconfinement: off\n")
    scen = tmp_path / "home.yaml"
    scen.write_text(
        "name: home\ndescription: writes the real home\nscripts:\n  - match: {mode: code}\n    turns:\n"
        "      - say: trying\n        actions:\n"
        f"          - bash: {{command: \"echo pwned > {Path.home()}/pwned-off\"}}\n"
        "      - say: |\n          done\n          <!--RESULT-->{\"status\":\"complete\",\"files_changed\":[],"
        "\"validation\":{\"commands\":[],\"passed\":true},\"risks\":[]}<!--/RESULT-->\n")
    task = tmp_path / "t.md"
    task.write_text("Try.\n")
    r = cli(*dispatch_args(worktrees["own"], scen, task, "off-1"))
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["verdict"] == "completed", (v, r.stderr)
    assert not (Path.home() / "pwned-off").exists()
    assert v["tool_errors"]["permission_denied"] == 1
    # the main checkout's opt-out is the one that counts
    (worktrees["main"] / ".ai").mkdir()
    (worktrees["main"] / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\nconfinement: off\n")
    r = cli(*dispatch_args(worktrees["own"], scen, task, "off-2"))
    assert json.loads(r.stdout.splitlines()[-1])["tool_errors"]["permission_denied"] == 0
    assert (Path.home() / "pwned-off").exists()


def _processes_with(needle: bytes) -> list[str]:
    hits = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            for part in ("cmdline", "environ"):
                try:
                    if needle in Path(f"/proc/{entry}/{part}").read_bytes():
                        hits.append(f"{entry}/{part}")
                except OSError:
                    pass
    return hits


def _bwrap_running_for(where: Path) -> bool:
    """A bwrap of this test's pilothouse (other suites may run their own in parallel)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.split(b"\0")[0].endswith(b"bwrap") and str(where).encode() in cmdline:
                return True
    return False


@pytest.mark.slow
def test_canary_key_over_a_whole_sim_job(cli, tmp_path):
    """The demo job (plan → build ×4 → gate → review → integrate, confined builders) with a canary
    key for the sim: no process's argv or environment, and no file pilothouse writes, holds it."""
    require_confinement()
    keys.set_key("sim", CANARY, use_backend="file")
    dest = tmp_path / "scratch"
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "demo", "--follow", "--dir", str(dest)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    leaks: set[str] = set()
    saw_bwrap = False
    while proc.poll() is None:
        leaks.update(_processes_with(CANARY.encode()))
        saw_bwrap = saw_bwrap or _bwrap_running_for(paths.data_dir())
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=guard(30))
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert b"job.accepted" in stdout
    assert saw_bwrap, "no worker of the job ran under bwrap"
    assert not leaks, f"the key is in the argv/environment of {sorted(leaks)}"
    assert CANARY.encode() not in stdout + stderr
    # every file pilothouse wrote (runtime store, events, logs, reports, verdicts, sandboxes but their
    # credential link), checked by `pilothouse scan-secrets` itself, and the job's git history
    scan = cli("scan-secrets", str(dest), "--json")
    assert scan.returncode == 0, scan.stdout
    assert json.loads(scan.stdout)["files"] > 20
    history = subprocess.run(["git", "log", "-p", "--all"], cwd=dest, capture_output=True).stdout
    assert CANARY.encode() not in history


def test_a_builder_cannot_write_a_protected_path_its_denial_is_reported(cli, worktrees, tmp_path):
    """gates.protected (the main checkout's project.yaml) is read-only in the builder's sandbox:
    the tool write and the shell append both fail at the kernel, the unprotected write lands."""
    (worktrees["main"] / ".ai").mkdir(exist_ok=True)
    (worktrees["main"] / ".ai" / "project.yaml").write_text(
        "gates: {fast: 'true', full: 'true', protected: ['tests/**']}\n")
    own = worktrees["own"]
    before = (own / "tests" / "test_calc.py").read_text()
    scen = tmp_path / "protected.yaml"
    scen.write_text(
        "name: protected\ndescription: a builder that rewrites a protected test\nscripts:\n"
        "  - match: {mode: code}\n    turns:\n"
        "      - say: weakening the test\n        actions:\n"
        "          - write: {path: tests/test_calc.py, content: \"def test_add():\\n    pass\\n\"}\n"
        "          - bash: {command: \"echo 'collect_ignore = [1]' >> tests/test_calc.py\"}\n"
        "          - write: {path: src/legit.py, content: \"VALUE = 1\\n\"}\n"
        "      - say: \"<!--RESULT-->{\\\"status\\\":\\\"complete\\\",\\\"files_changed\\\":[],"
        "\\\"validation\\\":{\\\"commands\\\":[],\\\"passed\\\":true},\\\"risks\\\":[]}<!--/RESULT-->\"\n")
    task = tmp_path / "task.md"
    task.write_text("Add src/legit.py.\n")
    r = cli(*dispatch_args(own, scen, task, "protected-1"), timeout=60)
    out = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(out) == 2, r.stdout + r.stderr
    assert out[1]["tool_errors"]["permission_denied"] == 2, out[1]
    assert (own / "tests" / "test_calc.py").read_text() == before
    assert (own / "src" / "legit.py").read_text() == "VALUE = 1\n"


def test_the_holdout_folder_is_hidden_even_from_a_reader_in_the_main_checkout(cli, worktrees, tmp_path):
    """gates.holdout is the operator's: a worker run in the main checkout itself (read-only modes
    run there) finds the folder empty; the tests in it appear nowhere in the run's output."""
    main = worktrees["main"]
    (main / ".ai").mkdir(exist_ok=True)
    (main / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true', holdout: holdout}\n")
    (main / "holdout").mkdir()
    (main / "holdout" / "test_hidden.py").write_text("SECRET_EXPECTATION = 'holdout-marker-5d1e'\n")
    scen = tmp_path / "peek.yaml"
    scen.write_text(
        "name: peek\ndescription: a worker that tries to read the holdout tests\nscripts:\n"
        "  - match: {mode: explore}\n    turns:\n"
        "      - say: peeking\n        actions:\n"
        "          - read: {path: holdout/test_hidden.py}\n"
        "          - grep: {pattern: SECRET_EXPECTATION}\n"
        "      - say: nothing there\n")
    task = tmp_path / "task.md"
    task.write_text("Look at the tests.\n")
    args = dispatch_args(main, scen, task, "peek-1")
    args[args.index("code")] = "explore"
    r = cli(*args, timeout=60)
    out = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(out) == 2, r.stdout + r.stderr
    tools = [json.loads(x) for x in Path(out[0]["log"]).read_text().splitlines()]
    read = [e.get("status") for e in tools if e.get("name") == "read" and e.get("status") != "started"]
    assert read == ["error"], tools  # the file is not there to read
    assert "holdout-marker-5d1e" not in r.stdout + r.stderr
