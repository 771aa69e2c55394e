"""A real terminal for the cockpit: a tmux server of the test's own, its screen and its keys."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support import guard


def need_tmux() -> None:
    # a failure, never a skip: the cockpit in a real terminal is what these tests check
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: run scripts/test (it installs tmux) or apt-get install tmux",
                    pytrace=False)


class Tmux:
    def __init__(self, sock: Path, name: str = "cockpit") -> None:
        self.sock, self.name = sock, name

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-S", str(self.sock), *args], capture_output=True, text=True, timeout=guard(20))

    def start(self, command: str, *, width: int = 120, height: int = 40, cwd: Path | None = None) -> None:
        """Run `command` in a new session; the shell around it shows its exit status as COCKPIT-EXIT=N."""
        where = ["-c", str(cwd)] if cwd is not None else []
        self.run("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), *where,
                 f"sh -c '{command}; echo COCKPIT-EXIT=$?; sleep 60'")

    def keys(self, *keys: str) -> None:
        """Each argument is one write to the terminal: "4h" arrives as one packet, as a paste would."""
        self.run("send-keys", "-t", self.name, *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-t", self.name, "-p").stdout

    def wait_for(self, *texts: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + guard(timeout)  # a guard against a hang, never a speed test
        while True:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {texts!r} on screen:\n{screen}")
            time.sleep(0.1)

    def close(self) -> None:
        self.run("kill-server")
