"""`pilothouse serve`: a real served process on loopback (and on a Unix socket) refuses every
request without the printed token, a foreign Host, a foreign Origin and a session past the cap; a
session that passes gets the cockpit drawn, and its answer is recorded under the session's name."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest
from browser import DevTools, artifacts_dir, chromium
from pilothouse.core.records.layout import RepoLayout
from support import guard

CLOSING = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)


@contextmanager
def served(repo: RepoLayout, *args: str) -> Iterator[tuple[str, str]]:
    """`pilothouse serve REPO --port 0 ARGS` running: yields (the address printed, its token)."""
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "serve", str(repo.root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ), start_new_session=True)
    try:
        assert proc.stdout is not None
        printed = proc.stdout.readline()
        found = re.search(r"open http://(\S+?)/\?token=(\S+)|listening on (\S+) ", printed)
        assert found, f"serve printed no address: {printed!r}"
        if found.group(3):  # socket mode: the tunnel command, then the URL through it
            printed += proc.stdout.readline() + proc.stdout.readline()
            address, token = found.group(3), re.search(r"token=(\S+)", printed).group(1)
        else:
            address, token = found.group(1), found.group(2)
        yield address, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def replies(layout: RepoLayout) -> list[sqlite3.Row]:
    conn = sqlite3.connect(layout.state_db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT * FROM replies ORDER BY id").fetchall()
    finally:
        conn.close()


async def read_screen(ws: aiohttp.ClientWebSocketResponse, *words: str, timeout: float = 60) -> str:
    screen = ""

    async def collect() -> None:
        nonlocal screen
        while not all(w in screen for w in words):
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                screen += msg.data.decode("utf-8", "replace")
            elif msg.type in CLOSING:
                raise AssertionError(f"the session ended before drawing {words}: {screen[-300:]!r}")

    await asyncio.wait_for(collect(), timeout)
    return screen


async def status(session: aiohttp.ClientSession, url: str, **kw: object) -> int:
    async with session.get(url, allow_redirects=False, **kw) as resp:  # type: ignore[arg-type]
        return resp.status


def test_every_request_without_the_token_is_refused(cockpit_repo) -> None:
    async def check(base: str, token: str) -> None:
        # unsafe: keep cookies of an IP-address host, as a browser does
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
            assert await status(s, base + "/") == 403
            assert await status(s, base + "/static/js/textual.js") == 403
            assert await status(s, base + "/?token=" + token[:-2] + "xx") == 403
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await s.ws_connect(base.replace("http", "ws") + "/ws")
            assert refused.value.status == 403
            with pytest.raises(aiohttp.WSServerHandshakeError) as wrong:
                await s.ws_connect(base.replace("http", "ws") + "/ws?token=not-the-token")
            assert wrong.value.status == 403
            # only the page's GET trades the token for a cookie and a redirect; other methods get the handler's answer
            async with s.delete(base + "/?token=" + token, allow_redirects=False) as resp:
                assert resp.status == 405
            # the token once: a cookie, the address bar cleaned, then the page and its assets
            async with s.get(base + "/?token=" + token, allow_redirects=False) as resp:
                assert resp.status == 303 and resp.headers["Location"] == "./"
                # no script of the page can read it, and no other site's request carries it
                assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {
                    p.strip() for p in resp.headers["Set-Cookie"].split(";")}, resp.headers["Set-Cookie"]
            async with s.get(base + "/") as resp:
                page = await resp.text()
                assert resp.status == 200
            assert await status(s, base + "/static/js/textual.js") == 200
        assert "<title>pilothouse · calendar</title>" in page
        assert "://" not in page, "the page names no absolute address: a tunnel on any port works"

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check("http://" + address, token))


def test_an_empty_or_partial_token_opens_nothing(cockpit_repo) -> None:
    async def check(base: str, token: str) -> None:
        cookie = "pilothouse-" + hashlib.sha256(token.encode()).hexdigest()[:12]
        wrong = ["", token[:1], token[:len(token) // 2], token[:-1], token + "0", token.upper()]
        async with aiohttp.ClientSession() as s:
            for offered in wrong:
                quoted = urllib.parse.quote(offered)
                assert await status(s, f"{base}/?token={quoted}") == 403, offered
                assert await status(s, f"{base}/static/js/textual.js?token={quoted}") == 403, offered
                with pytest.raises(aiohttp.WSServerHandshakeError) as ws:
                    await s.ws_connect(base.replace("http", "ws") + f"/ws?token={quoted}")
                assert ws.value.status == 403, offered
                # the cookie is checked as strictly as the query: a forged one with part of the token
                assert await status(s, base + "/", headers={"Cookie": f"{cookie}={quoted}"}) == 403, offered
            assert await status(s, f"{base}/?token=") == 403
            assert await status(s, f"{base}/?token={token}") == 303

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check("http://" + address, token))


def test_an_origin_with_a_path_on_the_same_host_is_refused(cockpit_repo) -> None:
    # no browser sends an Origin with a path: one that does is made up, and is not this page
    async def check(address: str, token: str) -> None:
        ws_url = f"ws://{address}/ws?token={token}&width=80&height=24"
        async with aiohttp.ClientSession() as s:
            for origin in (f"http://{address}/evil", f"http://{address}/ws", f"http://{address}//x"):
                assert await status(s, f"http://{address}/?token={token}", headers={"Origin": origin}) == 403, origin
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await s.ws_connect(ws_url, origin=origin)
                assert refused.value.status == 403, origin
            # the same origin, with or without its root slash, is this page
            for origin in (f"http://{address}", f"http://{address}/"):
                assert await status(s, f"http://{address}/?token={token}", headers={"Origin": origin}) == 303, origin

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check(address, token))


def test_foreign_host_and_foreign_origin_are_refused(cockpit_repo) -> None:
    async def check(address: str, token: str) -> None:
        port = address.rsplit(":", 1)[1]
        ws_url = f"ws://{address}/ws?token={token}"
        async with aiohttp.ClientSession() as s:
            # a rebinding DNS name reaches the same socket, but carries its own Host
            assert await status(s, f"http://{address}/?token={token}",
                                headers={"Host": f"evil.example:{port}"}) == 403
            with pytest.raises(aiohttp.WSServerHandshakeError) as host:
                await s.ws_connect(ws_url, headers={"Host": f"evil.example:{port}"})
            assert host.value.status == 403
            # a Host or an Origin no URL parser reads is refused like any other, never an error
            assert await status(s, f"http://{address}/?token={token}", headers={"Host": "[::1"}) == 403
            assert await status(s, f"http://{address}/?token={token}", headers={"Origin": "http://[::1"}) == 403
            # a page on another local port holds the owner's cookie, but not the owner's origin
            host = address.rsplit(":", 1)[0]
            for origin in ("http://evil.example", f"http://localhost:{int(port) + 1}", "null",
                           f"http://{host}:{int(port) - 1}", f"http://{host}", "http://127.0.0.0:" + port):
                with pytest.raises(aiohttp.WSServerHandshakeError) as foreign:
                    await s.ws_connect(ws_url, origin=origin)
                assert foreign.value.status == 403, origin
            # a tunnel's other port is fine: what counts is that Origin and Host agree
            async with s.ws_connect(f"ws://{address}/ws?token={token}&width=80&height=24",
                                    origin=f"http://{address}") as ws:
                await read_screen(ws, "Jobs")

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check(address, token))


def test_a_session_past_the_cap_is_refused_and_answers_carry_the_session_name(cockpit_repo) -> None:
    async def check(address: str, token: str) -> None:
        url = f"ws://{address}/ws?token={token}&width=100&height=30"
        async with aiohttp.ClientSession() as s, s.ws_connect(url) as first:
            await read_screen(first, "Jobs", "Problems", "calendar")
            with pytest.raises(aiohttp.WSServerHandshakeError) as capped:
                await s.ws_connect(url)
            assert capped.value.status == 503
            await read_screen(first, "KTRWMB")  # the problem's row is drawn
            for _ in range(12):  # keys the cockpit reads before its first poll can be lost: ask again
                for key in ("4", "r"):  # focus the problems panel, retry its highlighted problem
                    await first.send_json(["stdin", key])
                for _ in range(50):
                    if replies(cockpit_repo):
                        break
                    await asyncio.sleep(0.1)
                if replies(cockpit_repo):
                    break
        row = replies(cockpit_repo)[0]
        assert (row["code"], row["reply"]) == ("KTRWMB", "retry")
        assert re.fullmatch(r"alice@browser-[0-9a-f]{6}", row["who"]), row["who"]

    with served(cockpit_repo, "--port", "0", "--max-sessions", "1", "--label", "alice") as (address, token):
        asyncio.run(check(address, token))
    why = subprocess.run([sys.executable, "-m", "pilothouse", "why", "calendar-ui"], cwd=cockpit_repo.root,
                         capture_output=True, text=True, env=dict(os.environ))
    assert re.search(r"reply retry by alice@browser-[0-9a-f]{6}", why.stdout), why.stdout + why.stderr


def test_an_idle_session_is_ended(cockpit_repo) -> None:
    async def check(address: str, token: str) -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(f"ws://{address}/ws?token={token}") as ws:
            while True:
                msg = await asyncio.wait_for(ws.receive(), 60)
                if msg.type in CLOSING:
                    break
            assert ws.close_code == 4000

    with served(cockpit_repo, "--port", "0", "--idle-timeout", "1") as (address, token):
        asyncio.run(check(address, token))


def test_a_request_without_a_host_is_refused(cockpit_repo) -> None:
    # HTTP/1.0 needs no Host header: such a request cannot show it is meant for loopback
    with served(cockpit_repo, "--port", "0") as (address, token):
        name, port = address.rsplit(":", 1)
        with socket.create_connection((name, int(port)), timeout=30) as conn:
            conn.sendall(f"GET /?token={token} HTTP/1.0\r\n\r\n".encode())
            answer = b""
            while b"\r\n" not in answer:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
    assert answer.split(b"\r\n", 1)[0].split(b" ")[1] == b"403", answer[:200]


def test_unix_socket_mode_is_owner_only_and_still_wants_the_token(cockpit_repo, tmp_path: Path) -> None:
    sock = tmp_path / "cockpit.sock"

    async def check(token: str) -> None:
        connector = aiohttp.UnixConnector(path=str(sock))
        async with aiohttp.ClientSession(connector=connector) as s:
            assert await status(s, "http://localhost:8600/") == 403
            assert await status(s, f"http://localhost:8600/?token={token}") == 303

    with served(cockpit_repo, "--socket", str(sock)) as (address, token):
        assert address == str(sock)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        asyncio.run(check(token))
    assert not sock.exists()


def test_a_bad_label_is_one_line_naming_the_option(cockpit_repo) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse", "serve", str(cockpit_repo.root), "--label", "a b"],
                          capture_output=True, text=True, env=dict(os.environ), timeout=guard(60))
    assert done.returncode != 0
    assert "--label 'a b'" in done.stderr and "Traceback" not in done.stderr



def test_a_taken_port_is_one_line_naming_it(cockpit_repo) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "pilothouse", "serve", str(cockpit_repo.root), "--port",
                               str(port)], capture_output=True, text=True, env=dict(os.environ), timeout=guard(60))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr

# ---------------------------------------------------------------- a real browser

@pytest.mark.slow
def test_a_real_browser_answers_a_problem_by_keys_and_asks_nothing_off_loopback(cockpit_repo, tmp_path) -> None:
    shots = artifacts_dir(tmp_path)

    async def drive(page_ws: str, address: str, token: str) -> list[str]:
        async with aiohttp.ClientSession() as s, s.ws_connect(page_ws, max_msg_size=0) as ws:
            tools = DevTools(ws)
            for domain in ("Network", "Page", "Runtime"):
                await tools.send(f"{domain}.enable")
            await tools.send("Page.navigate", url=f"http://{address}/?token={token}")
            ready = ("document.title + '|' + document.body.classList.contains('-first-byte') + '|' + "
                     "(document.activeElement ? document.activeElement.className : '')")
            state = ""
            for _ in range(600):
                state = str(await tools.evaluate(ready))
                if "|true|" in state and "xterm-helper-textarea" in state:
                    break
                await asyncio.sleep(0.1)
            await tools.screenshot(shots / "drawn.png")
            assert state.startswith("pilothouse · calendar|true|"), f"never drawn: {state}"
            assert "xterm-helper-textarea" in state, "the terminal is not focused on load"
            for _ in range(12):  # keys the cockpit reads before its first poll can be lost: ask again
                for key in ("4", "r"):
                    await tools.press(key)
                for _ in range(50):
                    if replies(cockpit_repo):
                        break
                    await asyncio.sleep(0.1)
                if replies(cockpit_repo):
                    break
            await asyncio.sleep(1)  # the cockpit draws the answer's event
            await tools.screenshot(shots / "answered.png")
            asked = [e["params"]["request"]["url"] for e in tools.events if e.get("method") == "Network.requestWillBeSent"]
            asked += [e["params"]["url"] for e in tools.events if e.get("method") == "Network.webSocketCreated"]
            return asked

    with served(cockpit_repo, "--port", "0", "--label", "owner") as (address, token), chromium(tmp_path) as page:
        asked = asyncio.run(drive(page, address, token))
    row = replies(cockpit_repo)[0]
    assert (row["code"], row["reply"]) == ("KTRWMB", "retry")
    assert row["who"].startswith("owner@browser-")
    assert any(u.startswith("ws://") for u in asked), asked
    off = [u for u in asked if urllib.parse.urlsplit(u).hostname != "127.0.0.1" and not u.startswith(("data:", "blob:"))]
    assert not off, f"the page asked beyond loopback: {off}"
    assert (shots / "drawn.png").stat().st_size > 0 and (shots / "answered.png").stat().st_size > 0
