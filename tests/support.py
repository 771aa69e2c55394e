"""Helpers the tests import (`from support import git`): a module of its own, not conftest.py, because
tests/ and tests/tui/ each have a conftest.py and a plain `from conftest import` could find the wrong
one when both folders run in one process. pyproject's `pythonpath = ["tests"]` puts this folder on
sys.path."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from pilothouse.core.records.layout import RepoLayout


# How long a test waits for what must happen (a process ending, an event appearing) before it calls
# it a hang. Only a guard: the verdict is what happened, so it is generous for a machine that other
# work keeps busy (load 80 on 2 cores stretches a 1-second CLI call to a minute). A shorter wait
# asked for by a test is raised to it (`guard`).
GUARD_S = float(os.environ.get("PILOTHOUSE_TEST_GUARD_S") or 900)


def guard(timeout: float | None) -> float:
    return GUARD_S if timeout is None else max(timeout, GUARD_S)


def until(check: Callable[[], Any], what: str, every: float = 0.05) -> Any:
    """Look again every `every` seconds until `check()` gives something true, and give that. Only
    the guard ends the wait, and then the test fails saying what never came: how long it took is
    never the verdict."""
    import time

    deadline = time.monotonic() + GUARD_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so after {GUARD_S:g}s (the suite's guard against a hang)")
        time.sleep(every)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def project_layout(root: Path, project_yaml: str) -> RepoLayout:
    """A repository layout at `root` whose .ai/project.yaml is `project_yaml` (no git needed)."""
    from pilothouse.core.records.layout import RepoLayout

    lay = RepoLayout(root)
    lay.ai.mkdir(parents=True, exist_ok=True)
    lay.project_yaml.write_text(project_yaml)
    return lay


def no_bwrap_env(tmp_path: Path) -> dict[str, str]:
    """A machine without bubblewrap: a PATH of the tools the tests need, without bwrap. bwrap_path()
    also looks at /usr/bin/bwrap, so its override points at nothing too."""
    import shutil

    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("git", "sh", "bash", "env", "python3"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{bin_dir}",
            "PILOTHOUSE_BWRAP": str(tmp_path / "no-bwrap-here")}


class Events:
    """The events a test waits for, read from the log as they are appended (everything read is kept
    in `seen`, for the failure message and later assertions)."""

    def __init__(self, layout: RepoLayout, timeout: float = GUARD_S) -> None:
        from pilothouse.core.state.events import EventTailer

        self.tailer = EventTailer(layout.events)
        self.timeout = timeout
        self.seen: list[dict[str, Any]] = []
        # read but not yet looked at: a batch read whole can hold the line a wait matches and the lines
        # after it, which the next wait must still see
        self._unseen: collections.deque[dict[str, Any]] = collections.deque()

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float | None = None) -> dict[str, Any]:
        import time

        timeout = guard(self.timeout if timeout is None else timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._unseen:
                self._unseen.extend(self.tailer.read_new())
            while self._unseen:
                ev = self._unseen.popleft()
                self.seen.append(ev)
                if pred(ev):
                    return ev
            time.sleep(0.02)
        raise AssertionError(f"event not seen in {timeout}s; last: {[e['type'] for e in self.seen[-8:]]}")


def one_shot_http(response: bytes) -> str:
    """A loopback HTTP server that reads one request and answers it with RESPONSE, bytes as given;
    its /v1 base URL."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(response)
        conn.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/v1"


ISOLATED = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
            "XDG_RUNTIME_DIR", "PILOTHOUSE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR")


def isolated_env(base: Path) -> dict[str, str]:
    """HOME, XDG_* and PILOTHOUSE_HOME under `base` (made here, with a git identity): what
    tests/conftest.py gives each test, for a fixture wider than one test, which runs before any
    test's own (module and session fixtures would otherwise see the real home)."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PILOTHOUSE_HOME": str(base / "pilothouse")}
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    # real git in tests needs an identity and a predictable default branch
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
    )
    return env


def run_cli(*args: str, cwd: Path | None = None, input: str | None = None, timeout: float | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess with the test's (isolated) environment; `timeout` only
    guards against a hang, so it is at least GUARD_S, however busy the machine."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=guard(timeout), env=full_env)


def wait_job(cli: Any, root: Path, job: str) -> subprocess.CompletedProcess[str]:
    """`job wait` until the job ends, for as long as it moves: a job whose agent CLIs take minutes
    each on a busy machine is slow, not hung. It is a hang when the event log gains nothing but
    heartbeats for the suite's guard."""
    import time

    from pilothouse.core.records.layout import RepoLayout

    log = RepoLayout(root).events

    def moved() -> int:
        text = log.read_text(errors="replace") if log.exists() else ""
        return sum(1 for line in text.splitlines() if '"supervisor.heartbeat"' not in line)

    seen, since = moved(), time.monotonic()
    while True:
        r = cli("job", "wait", job, "--repo", str(root), "--timeout", "60")
        if r.returncode != 124:  # 124: still going after the 60 s asked for
            return r
        now = moved()
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > GUARD_S:
            raise AssertionError(f"job {job} made no move in {GUARD_S:g}s: {r.stdout[-2000:]}")


def run_cli_bounded(*args: str, cwd: Path) -> subprocess.CompletedProcess[str] | None:
    """Run the real CLI where it must answer at once (a FIFO in place of a file it reads): None when
    it was still running after the suite's guard and was killed, so a hang fails this one test. The
    bound is the guard, not a guess at how long a CLI takes, so a busy machine changes no verdict."""
    try:
        return subprocess.run([sys.executable, "-m", "pilothouse", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=GUARD_S, stdin=subprocess.DEVNULL, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return None


def fix_stopped_demo_by_hand(cli: Any, root: Path) -> None:
    """The operator's hand fix of the demo stopped by its `gate-fails-twice` scenario: slugify
    written in the stopped task's worktree, the task retried, the job waited for to the end."""
    import json

    fix_slugify(Path(json.loads(cli("problem", "list", "--json", cwd=root).stdout)[0]["evidence"]["worktree"]))
    assert cli("task", "retry", "add-slugify", cwd=root).returncode == 0
    done = cli("job", "wait", "demo", "--timeout", "300", cwd=root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def fix_slugify(worktree: Path) -> None:
    """What the operator writes by hand in the stopped `add-slugify` worktree: a slugify that passes."""
    (worktree / "textkit/slugify.py").write_text(
        "import unicodedata\n\n\ndef slugify(text: str) -> str:\n"
        "    folded = unicodedata.normalize('NFKD', text).encode('ascii', 'ignore').decode('ascii')\n"
        "    return '-'.join(folded.lower().split())\n")


def refuses_unusable_log(repo: Path, kind: str, *argv: str) -> None:
    """A FIFO or a directory put in the event log's place: the command ends with the log door's one line."""
    events = repo / ".ai/runtime/events.jsonl"
    events.parent.mkdir(parents=True)
    os.mkfifo(events) if kind == "a FIFO" else events.mkdir()
    r = run_cli_bounded(*argv, cwd=repo)
    assert r is not None, f"{argv[0]} hung on {kind}"
    assert r.returncode == 2 and not r.stdout
    assert r.stderr.splitlines() == [f"pilothouse: {events} is {kind}, not the event log: move it aside "
                                     f"(mv {events} {events}.aside) and run this again; the next event starts a "
                                     "new log there"]


def stamp(t: float) -> str:
    """A POSIX time as the event log writes it (utc_now_iso: milliseconds, Z)."""
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(t, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def write_log(path: Path, lines: list[tuple[float | str, str, dict[str, Any]]], job: str = "j") -> None:
    """An event log in the log's own format, with the stamps a test chooses: each line is (a POSIX
    time or a ts string as it is, the type, its fields: task, run, data; job `job` unless given)."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for seq, (at, kind, fields) in enumerate(lines, start=1):
        event = {"seq": seq, "ts": at if isinstance(at, str) else stamp(at), "type": kind, "job": job,
                 "task": None, "run": None, "data": {}, **fields}
        out.append(json.dumps(event, separators=(",", ":")))
    path.write_text("\n".join(out) + "\n")
