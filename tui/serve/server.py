"""`pilothouse serve`: the cockpit in a browser, on textual-serve's process bridge (AppService) and
its terminal page assets, behind pilothouse's own guard, page, session cap and idle timeout.

Each browser tab gets its own `pilothouse view` process, started with PILOTHOUSE_WHO naming the
session, so every answer it records says which browser session gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import secrets
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from aiohttp import WSMsgType, web
from pilothouse.providers.hostpython import host_env, python_argv
from pilothouse.tui.serve.guard import LOOPBACK_NAMES, Guard
from textual_serve.app_service import AppService
from textual_serve.server import Server

PAGE = Template((Path(__file__).with_name("index.html")).read_text(encoding="utf-8"))
_CLOSED = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


@dataclass(frozen=True)
class ServeOptions:
    repo: Path
    label: str  # the first half of every session's name in the audit trail
    host: str = "127.0.0.1"
    port: int = 8600
    socket: Path | None = None  # serve on this Unix socket instead of host:port
    max_sessions: int = 4
    idle_timeout: float = 1800.0  # seconds without a key, resize or focus before a session ends


class _Session(AppService):
    """One cockpit process; its environment names the session for the audit trail."""

    def __init__(self, command: str, who: str, **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self.who = who

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        env = host_env(super()._build_environment(width, height))
        env["PILOTHOUSE_WHO"] = self.who
        return env


class CockpitServer(Server):
    def __init__(self, options: ServeOptions, token: str) -> None:
        command = shlex.join(python_argv("-m", "pilothouse", "view", str(options.repo)))
        super().__init__(command, host=options.host, port=options.port, title=f"pilothouse · {options.repo.name}")
        self.options = options
        extra = frozenset() if options.host in LOOPBACK_NAMES else frozenset({options.host.lower()})
        self.guard = Guard(token, extra)
        self.sessions: dict[str, _Session] = {}

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard.middleware])
        app.add_routes([web.get("/", self.handle_index), web.get("/ws", self.handle_websocket),
                        web.static("/static", self.statics_path)])
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def handle_index(self, request: web.Request) -> web.Response:  # type: ignore[override]
        try:
            font_size = max(6, min(48, int(request.query.get("fontsize", "16"))))
        except ValueError:
            font_size = 16
        page = PAGE.substitute(title=html.escape(self.title), font_size=font_size)
        return web.Response(text=page, content_type="text/html",
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:  # type: ignore[override]
        if len(self.sessions) >= self.options.max_sessions:
            raise web.HTTPServiceUnavailable(
                text=f"pilothouse serve: refused: {self.options.max_sessions} live sessions already "
                "(the cap, --max-sessions): close a tab and open again\n")
        name = secrets.token_hex(3)
        while name in self.sessions:
            name = secrets.token_hex(3)
        websocket = web.WebSocketResponse(heartbeat=15)
        width = _size(request.query.get("width"), 80)
        height = _size(request.query.get("height"), 24)
        session = _Session(self.command, f"{self.options.label}@browser-{name}",
                           write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                           close=websocket.close, download_manager=self.download_manager)
        self.sessions[name] = session  # counted before the first await: two handshakes can't both pass the cap
        try:
            await websocket.prepare(request)
            print(f"pilothouse serve: session {session.who} opened", flush=True)
            await session.start(width, height)
            await self._relay(websocket, session)
        except asyncio.CancelledError:
            await websocket.close()
        finally:
            self.sessions.pop(name, None)
            await session.stop()
            print(f"pilothouse serve: session {session.who} closed", flush=True)
        return websocket

    async def _relay(self, websocket: web.WebSocketResponse, session: _Session) -> None:
        """Browser → cockpit, until the tab closes or sits idle past the timeout."""
        while True:
            try:
                message = await websocket.receive(timeout=self.options.idle_timeout)
            except TimeoutError:
                await websocket.close(code=4000, message=b"idle timeout")
                return
            if message.type in _CLOSED:
                return
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
                kind, data = (envelope + [None])[:2] if isinstance(envelope, list) else (None, None)
            except (ValueError, TypeError):
                continue
            if kind == "stdin" and isinstance(data, str):
                await session.send_bytes(data.encode("utf-8"))
            elif kind == "resize" and isinstance(data, dict):
                await session.set_terminal_size(_size(data.get("width"), 80), _size(data.get("height"), 24))
            elif kind == "ping" and isinstance(data, str):
                await websocket.send_json(["pong", data])
            elif kind == "blur":
                await session.blur()
            elif kind == "focus":
                await session.focus()

    async def on_shutdown(self, app: web.Application) -> None:
        for session in list(self.sessions.values()):
            await session.stop()

    async def run(self, announce: Any) -> None:
        """Serve until SIGINT/SIGTERM; `announce(address)` once the socket listens."""
        runner = web.AppRunner(await self._make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        opts = self.options
        site: web.BaseSite
        if opts.socket is not None:
            with contextlib.suppress(FileNotFoundError):
                opts.socket.unlink()
            old = os.umask(0o177)  # the socket file is the owner's alone, before anyone can connect
            try:
                site = web.UnixSite(runner, str(opts.socket))
                await site.start()
            finally:
                os.umask(old)
            address = str(opts.socket)
        else:
            site = web.TCPSite(runner, opts.host, opts.port)
            await site.start()
            host, port = runner.addresses[0][:2]
            address = f"{'[' + host + ']' if ':' in host else host}:{port}"
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        announce(address)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
            if opts.socket is not None:
                with contextlib.suppress(FileNotFoundError):
                    opts.socket.unlink()


def _size(value: object, default: int) -> int:
    try:
        return max(10, min(1000, int(value)))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
