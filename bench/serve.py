"""`pilothouse serve` figures: serve start → listening, and serve start → the cockpit's first frame
drawn for a browser session (the page fetched with the token, its WebSocket opened, the panels drawn).

    python bench/serve.py [--runs 5]

Goal (issue 20): serve start → page drawn ≤ 1 s. Prints figures; asserts nothing. On a shared,
busy machine wall-clock figures measure the queue for the CPU: the load average is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp


def make_repo(root: Path) -> Path:
    repo = root / "bench-repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "pilothouse", "init", "--gate-fast", "true", "--gate-full", "true"],
                   cwd=repo, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "GIT_AUTHOR_NAME": "bench",
                   "GIT_AUTHOR_EMAIL": "bench@localhost", "GIT_COMMITTER_NAME": "bench",
                   "GIT_COMMITTER_EMAIL": "bench@localhost"})
    return repo


async def first_frame(address: str, token: str) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        async with s.get(f"http://{address}/?token={token}") as page:
            assert page.status == 200, page.status
            await page.text()
        async with s.ws_connect(f"ws://{address}/ws?width=120&height=40") as ws:
            screen = ""
            while "Jobs" not in screen or "Problems" not in screen:
                msg = await asyncio.wait_for(ws.receive(), 60)
                if msg.type != aiohttp.WSMsgType.BINARY:
                    raise SystemExit(f"the session ended before drawing: {msg.type}")
                screen += msg.data.decode("utf-8", "replace")


def one_run(repo: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "serve", str(repo), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        found = re.search(r"open http://(\S+?)/\?token=(\S+)", proc.stdout.readline())
        if not found:
            raise SystemExit("serve printed no URL")
        listening = time.perf_counter() - start
        asyncio.run(first_frame(found.group(1), found.group(2)))
        return listening, time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--runs", type=int, default=5, help="serves started and timed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PILOTHOUSE_HOME"] = str(Path(tmp) / "home")
        repo = make_repo(Path(tmp))
        figures = [one_run(repo) for _ in range(args.runs)]
    listen = [f[0] for f in figures]
    drawn = [f[1] for f in figures]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"serve start → listening:   median {statistics.median(listen):.3f} s  (max {max(listen):.3f} s)")
    print(f"serve start → page drawn:  median {statistics.median(drawn):.3f} s  (max {max(drawn):.3f} s)"
          "  goal ≤ 1 s")


if __name__ == "__main__":
    main()
