"""`textual serve -c "pilothouse view"`: the page answers on loopback and a browser's websocket gets
the cockpit drawn (the app really starts in the served process), then `q` ends it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp  # with textual-dev, a dev dependency (pyproject [dev]) that provides `textual serve`
import textual_dev  # noqa: F401  (missing: pip install -e '.[dev]', which scripts/test runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_textual_serve_serves_the_cockpit(cockpit_repo, tmp_path: Path) -> None:
    textual = Path(sys.executable).with_name("textual")
    port = free_port()
    command = f"{sys.executable} -m pilothouse view {cockpit_repo.root}"
    server = subprocess.Popen([str(textual), "serve", "-c", "--host", "127.0.0.1", "--port", str(port), command],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(os.environ), start_new_session=True)
    try:
        asyncio.run(_browse(port))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


async def _browse(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 30
        while True:
            try:
                async with session.get(base + "/") as resp:
                    page = await resp.text()
                    assert resp.status == 200
                    break
            except aiohttp.ClientConnectionError:
                assert time.monotonic() < deadline, "textual serve never answered"
                await asyncio.sleep(0.2)
        assert "textual" in page.lower() and "/ws" in page
        async with session.ws_connect(f"ws://127.0.0.1:{port}/ws?width=100&height=30") as ws:
            screen = ""
            while "Jobs" not in screen or "Problems" not in screen:
                msg = await asyncio.wait_for(ws.receive(), timeout=max(1.0, deadline - time.monotonic()))
                if msg.type == aiohttp.WSMsgType.BINARY:
                    screen += msg.data.decode("utf-8", "replace")
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    screen += msg.data
                else:
                    raise AssertionError(f"websocket ended early: {msg.type}")
            assert "calendar" in screen  # the repository served
            await ws.send_json(["stdin", "q"])
            closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
            while True:  # the app quits, so the server closes the socket
                msg = await asyncio.wait_for(ws.receive(), timeout=20)
                if msg.type in closing:
                    break
