"""The real cockpit in a real terminal (tmux): it opens, shows its panels, answers a problem with `r`,
and `q` leaves the terminal as it found it."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pilothouse.core.state.store import connect


@pytest.fixture(autouse=True)
def _tmux_installed() -> None:
    # a failure, never a skip: the cockpit in a real terminal is what this file checks
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: run scripts/test (it installs tmux) or apt-get install tmux",
                    pytrace=False)


class Tmux:
    def __init__(self, sock: Path, name: str = "cockpit") -> None:
        self.sock, self.name = sock, name

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-S", str(self.sock), *args], capture_output=True, text=True, timeout=20)

    def screen(self) -> str:
        return self.run("capture-pane", "-t", self.name, "-p").stdout

    def wait_for(self, *texts: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {texts!r} on screen:\n{screen}")
            time.sleep(0.1)


def test_cockpit_in_tmux(cockpit_repo, tmp_path: Path) -> None:
    tmux = Tmux(tmp_path / "tmux.sock")
    app = f"{shlex.quote(sys.executable)} -m pilothouse view {shlex.quote(str(cockpit_repo.root))}"
    # the shell around the app shows its exit status once the alternate screen is gone
    tmux.run("new-session", "-d", "-s", tmux.name, "-x", "120", "-y", "40",
             f"sh -c '{app}; echo COCKPIT-EXIT=$?; sleep 30'")
    try:
        screen = tmux.wait_for("1 Jobs", "2 Providers", "3 Tasks", "4 Problems", "5 Events", "KTRWMB")
        assert "calendar-api" in screen and "first-draft" in screen
        tmux.run("send-keys", "-t", tmux.name, "4")
        time.sleep(0.3)
        tmux.run("send-keys", "-t", tmux.name, "r")
        tmux.wait_for("problem.answered")  # drawn from the event log, once core wrote it
        db = connect(cockpit_repo.state_db, readonly=True)
        rows = db.execute("SELECT code, reply FROM replies").fetchall()
        db.close()
        assert [tuple(r) for r in rows] == [("KTRWMB", "retry")]
        answered = [json.loads(line) for line in cockpit_repo.events.read_text().splitlines()
                    if '"problem.answered"' in line]
        assert answered and answered[-1]["data"]["reply"] == "retry"
        tmux.run("send-keys", "-t", tmux.name, "q")
        screen = tmux.wait_for("COCKPIT-EXIT=0")
        assert "5 Events" not in screen  # the alternate screen is gone: the terminal is restored
    finally:
        tmux.run("kill-server")
