"""Who may reach the served cockpit: the holder of the printed token, from a loopback page.

Every request passes `guard` before any handler: the Host must name this machine's loopback (a
page on a rebinding DNS name carries its own Host), the token must come in the query (first
visit) or in the cookie it sets, and a request that carries an Origin (every WebSocket handshake
and every cross-page fetch does) must come from the very origin it is addressed to, so a page
served by another local port cannot drive the cockpit with the owner's cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


class Guard:
    """The checks, with the token they compare against (kept only in this process's memory)."""

    def __init__(self, token: str, extra_hosts: frozenset[str] = frozenset()) -> None:
        self._token = token.encode()
        # cookies are shared by every port of a host: a name of its own per token keeps two
        # served cockpits (two ports, two tokens) from overwriting each other's
        self.cookie = "pilothouse-" + hashlib.sha256(self._token).hexdigest()[:12]
        self.hosts = LOOPBACK_NAMES | extra_hosts

    def token_ok(self, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(offered.encode(), self._token)

    def host_ok(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        try:
            name = urlsplit("//" + host_header).hostname
        except ValueError:
            return False
        return name is not None and name.lower() in self.hosts

    @staticmethod
    def origin_ok(origin: str | None, host_header: str) -> bool:
        """No Origin (a plain navigation) passes; any other must be http(s)://<the Host asked for>."""
        if origin is None:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host_header.lower() \
            and not parts.path.strip("/")

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not self.host_ok(host):
            raise web.HTTPForbidden(text="pilothouse serve: refused: the Host is not this machine's loopback "
                                    "(open the printed URL, or an SSH tunnel to it, on localhost)\n")
        assert host is not None
        if not self.origin_ok(request.headers.get("Origin"), host):
            raise web.HTTPForbidden(text="pilothouse serve: refused: a page from another origin\n")
        by_query = request.query.get("token")
        if self.token_ok(by_query):
            if request.path == "/" and request.method == "GET":
                # the token leaves the address bar (history, screenshots) once it is a cookie
                response: web.StreamResponse = web.Response(status=303, headers={"Location": "./"})
            else:
                response = await handler(request)
            response.set_cookie(self.cookie, by_query or "", httponly=True, samesite="Strict", path="/")
            return response
        if self.token_ok(request.cookies.get(self.cookie)):
            return await handler(request)
        raise web.HTTPForbidden(text="pilothouse serve: refused: open the URL `pilothouse serve` printed, "
                                "with its token\n")
