"""Every way into the cockpit opens the same app through core.commands.view.open_cockpit, each in a real
terminal (tmux) or, for `serve`, a real browser session: `pilothouse`, `pilothouse view REPO`,
`pilothouse demo` (without --follow: it once crashed before the cockpit opened and left its supervisor
running) and `pilothouse serve`."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from support import guard
from test_serve import read_screen, served
from tmux_support import Tmux, need_tmux

PANELS = ("1 Jobs", "2 Providers", "3 Tasks", "4 Problems", "5 Events")
PILOTHOUSE = f"{shlex.quote(sys.executable)} -m pilothouse"


@pytest.fixture
def tmux(tmp_path: Path):
    need_tmux()
    term = Tmux(tmp_path / "tmux.sock")
    yield term
    term.close()


def _open_and_quit(tmux: Tmux, *texts: str) -> str:
    tmux.wait_for(*PANELS, *texts, timeout=60)
    tmux.keys("q")
    return tmux.wait_for("COCKPIT-EXIT=", timeout=60)


def test_bare_pilothouse_in_a_repository_opens_the_cockpit(cockpit_repo, tmux) -> None:
    tmux.start(PILOTHOUSE, cwd=cockpit_repo.root)
    screen = _open_and_quit(tmux, "first-draft", "KTRWMB")
    assert "COCKPIT-EXIT=0" in screen and "Traceback" not in screen


def test_view_repo_opens_the_cockpit(cockpit_repo, tmux, tmp_path: Path) -> None:
    tmux.start(f"{PILOTHOUSE} view {shlex.quote(str(cockpit_repo.root))}", cwd=tmp_path)
    screen = _open_and_quit(tmux, "first-draft", "KTRWMB")
    assert "COCKPIT-EXIT=0" in screen and "Traceback" not in screen


def test_demo_without_follow_opens_the_cockpit_on_its_job(tmux, tmp_path: Path) -> None:
    dest = tmp_path / "scratch"
    tmux.start(f"{PILOTHOUSE} demo --dir {shlex.quote(str(dest))}", cwd=tmp_path)
    try:
        screen = _open_and_quit(tmux, "demo")
        assert "Traceback" not in screen and "AttributeError" not in screen
        assert f"scratch repository: {dest.resolve()}" in screen
        assert "COCKPIT-EXIT=1" not in screen  # 0 accepted, 3 waiting: the job ran under the cockpit
    finally:
        subprocess.run([sys.executable, "-m", "pilothouse", "job", "stop", "--repo", str(dest)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=guard(60))


def test_serve_gives_each_browser_tab_the_cockpit(cockpit_repo) -> None:
    async def check(address: str, token: str) -> None:
        url = f"ws://{address}/ws?token={token}&width=120&height=40"
        async with aiohttp.ClientSession() as s, s.ws_connect(url) as tab:
            await read_screen(tab, "Jobs", "Problems", "KTRWMB")

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check(address, token))
