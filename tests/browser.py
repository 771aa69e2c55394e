"""A real headless Chromium for tests, driven over the DevTools protocol: the served cockpit's
browser test and the HTML report's offline test both open their pages in it."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1200,800", "--remote-debugging-port=0")


class DevTools:
    """One page of a headless Chromium, driven over the DevTools protocol (its WebSocket)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        self._waiting[n] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"id": n, "method": method, "params": params})
        answer = await asyncio.wait_for(self._waiting[n], 60)
        assert "error" not in answer, (method, answer)
        return answer.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        return (await self.send("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode((await self.send("Page.captureScreenshot", format="png"))["data"]))

    async def press(self, key: str) -> None:
        await self.send("Input.dispatchKeyEvent", type="keyDown", key=key, text=key)
        await self.send("Input.dispatchKeyEvent", type="keyUp", key=key)


@contextmanager
def chromium(tmp_path: Path) -> Iterator[str]:
    """A fresh headless Chromium: yields its first page's DevTools WebSocket address."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium is not installed (scripts/test installs Debian's package)")
    proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if found := re.search(r"DevTools listening on ws://([^/]+)/", line):
                break
        else:
            raise AssertionError("chromium ended before opening DevTools")
        targets = json.loads(urllib.request.urlopen(f"http://{found.group(1)}/json/list", timeout=30).read())
        yield next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def artifacts_dir(tmp_path: Path) -> Path:
    """PILOTHOUSE_TEST_ARTIFACTS (scripts/test sets it) keeps screenshots past the run."""
    kept = os.environ.get("PILOTHOUSE_TEST_ARTIFACTS")
    return Path(kept) / "serve" if kept else tmp_path / "artifacts"
