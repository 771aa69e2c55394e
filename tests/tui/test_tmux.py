"""The real cockpit in a real terminal (tmux): it opens, shows its panels, answers a problem with `r`,
and `q` leaves the terminal as it found it."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from pilothouse.core.state.store import connect
from tmux_support import Tmux, need_tmux


@pytest.fixture(autouse=True)
def _tmux_installed() -> None:
    need_tmux()


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


def test_shell_in_a_worktree_lends_the_terminal_and_offers_the_retry(cockpit_repo, ui_worktree, tmp_path) -> None:
    """`!` on a stopped task: the cockpit gives the terminal to a shell in the task's worktree (App.suspend),
    takes it back when the shell exits, and offers the retry that takes the operator's fix."""
    tmux = Tmux(tmp_path / "tmux.sock")
    app = f"{shlex.quote(sys.executable)} -m pilothouse view {shlex.quote(str(cockpit_repo.root))}"
    tmux.run("new-session", "-d", "-s", tmux.name, "-x", "120", "-y", "40",
             f"sh -c 'SHELL=/bin/sh {app}; echo COCKPIT-EXIT=$?; sleep 30'")
    try:
        tmux.wait_for("3 Tasks", "KTRWMB")
        for key in ("3", "j", "j"):  # calendar-ui, stopped on KTRWMB
            tmux.run("send-keys", "-t", tmux.name, key)
            time.sleep(0.3)
        tmux.run("send-keys", "-t", tmux.name, "!")
        screen = tmux.wait_for("an UNCONFINED shell in the worktree of first-draft/calendar-ui")
        assert "3 Tasks" not in screen  # the cockpit has let go of the screen
        tmux.run("send-keys", "-t", tmux.name, "pwd; echo columns = 7 > src/ui.py; echo '# fixed' >> src/ui.py",
                 "Enter")
        tmux.wait_for(str(ui_worktree))
        tmux.run("send-keys", "-t", tmux.name, "exit", "Enter")
        tmux.wait_for("retry · KTRWMB", "Back from the worktree of calendar-ui (1 file changed")
        tmux.run("send-keys", "-t", tmux.name, "y")
        tmux.wait_for("problem.answered")
        db = connect(cockpit_repo.state_db, readonly=True)
        rows = db.execute("SELECT code, reply FROM replies").fetchall()
        db.close()
        assert [tuple(r) for r in rows] == [("KTRWMB", "retry")]
        assert (ui_worktree / "src" / "ui.py").read_text() == "columns = 7\n# fixed\n"
        tmux.run("send-keys", "-t", tmux.name, "q")
        tmux.wait_for("COCKPIT-EXIT=0")
    finally:
        tmux.run("kill-server")
