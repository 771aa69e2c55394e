"""`pilothouse serve`'s guard, through a real served process's answer: a Host is this machine's
loopback only when it *is* an allowed name (never when it merely starts with one, ends with one or
holds one: a rebinding DNS name such as localhost.evil.test or 127.0.0.1.nip.io reaches the same
socket), and a request from a foreign Origin is refused whatever token it carries, the owner's
cookie included."""

from __future__ import annotations

import asyncio
import http.client

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_serve import served, status

NOT_LOOPBACK = "the Host is not this machine's loopback"
FOREIGN_ORIGIN = "a page from another origin"


def ask(address: str, path: str, host: str, **headers: str) -> tuple[int, str]:
    """The server's status and text for one GET naming `host` in its Host header."""
    name, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(name, int(port), timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host, **headers})
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")  # a 101 has no body: read ends at once
    finally:
        conn.close()


def handshake() -> dict[str, str]:
    return {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


def lookalikes(name: str) -> list[str]:
    """Names that start with, end with or hold `name`, without being it."""
    if ":" in name:  # an IPv6 literal: only in brackets is it a Host
        return ["[::1:2]", "[::10]", "[1::1]", "[2001:db8::1]", "[1::1:2]"]
    return [f"{name}.evil.test", f"{name}evil", f"{name}-evil", f"{name}.",  # starts with
            f"evil-{name}", f"evil{name}", f"1{name}",  # ends with
            f"evil-{name}.test", f"a.{name}.nip.io", f"x{name}y", f"{name.upper()}.EVIL.TEST"]  # holds


@pytest.mark.parametrize("bind", [None, "127.0.0.2"], ids=["loopback", "another-bound-address"])
def test_a_host_that_only_starts_ends_or_holds_an_allowed_name_is_refused(cockpit_repo, bind: str | None) -> None:
    args = ("--port", "0") if bind is None else ("--host", bind, "--port", "0")
    with served(cockpit_repo, *args) as (address, token):
        port = address.rsplit(":", 1)[1]
        allowed = ["localhost", "127.0.0.1", "::1", *([bind] if bind else [])]
        # the very names pass: this server would answer them
        for name in allowed:
            host = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
            assert ask(address, f"/?token={token}", host)[0] == 303, host
        for name in allowed:
            for looks in lookalikes(name):
                for path, headers in ((f"/?token={token}", {}), (f"/ws?token={token}", handshake())):
                    code, text = ask(address, path, f"{looks}:{port}", **headers)
                    assert (code, NOT_LOOPBACK in text) == (403, True), (looks, path, code, text[:200])

        names = [n for n in allowed if ":" not in n]
        label = st.text("abcdefghijklmnopqrstuvwxyz0123456789-.", max_size=12)

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(name=st.sampled_from(names), before=label, after=label)
        def any_lookalike(name: str, before: str, after: str) -> None:
            looks = before + name + after
            if looks.lower() in allowed:
                return
            code, text = ask(address, f"/?token={token}", f"{looks}:{port}")
            assert (code, NOT_LOOPBACK in text) == (403, True), (looks, code, text[:200])

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(before=st.text("0123456789abcdef:", max_size=8), after=st.text("0123456789abcdef:", max_size=8))
        def any_ipv6_lookalike(before: str, after: str) -> None:
            looks = before + "::1" + after
            if looks == "::1":
                return
            code, text = ask(address, f"/?token={token}", f"[{looks}]:{port}")
            assert (code, NOT_LOOPBACK in text) == (403, True), (looks, code, text[:200])

        any_lookalike()
        any_ipv6_lookalike()


@pytest.mark.parametrize("carried", ["cookie", "query", "cookie and query"])
def test_a_foreign_origin_is_refused_whatever_token_the_request_carries(cockpit_repo, carried: str) -> None:
    async def check(address: str, token: str) -> None:
        base, port = f"http://{address}", int(address.rsplit(":", 1)[1])
        query = f"?token={token}" if "query" in carried else ""
        # unsafe: keep cookies of an IP-address host, as a browser does
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
            if "cookie" in carried:
                assert await status(s, f"{base}/?token={token}") == 303  # the owner's first visit: the cookie
                assert len(s.cookie_jar) == 1
                assert await status(s, base + "/") == 200  # the cookie alone opens the page
            # another local port's page, another name for this one, a made-up or opaque origin
            for origin in (f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port - 1}", f"http://localhost:{port}",
                           "http://evil.example", f"http://evil.example:{port}", "null", f"http://{address}/evil",
                           f"http://{address}.evil.test", f"ws://{address}", f"file://{address}"):
                for path in ("/", "/static/js/textual.js"):
                    async with s.get(base + path + query, headers={"Origin": origin}, allow_redirects=False) as resp:
                        text = await resp.text()
                        assert (resp.status, FOREIGN_ORIGIN in text) == (403, True), (origin, path, resp.status)
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await s.ws_connect(f"ws://{address}/ws{query}", origin=origin)
                assert refused.value.status == 403, origin
            # the page's own origin is let through with the same credentials
            want = 303 if "query" in carried else 200
            assert await status(s, base + "/" + query, headers={"Origin": base}) == want

    with served(cockpit_repo, "--port", "0") as (address, token):
        asyncio.run(check(address, token))
