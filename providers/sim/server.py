"""The sim: a loopback HTTP server that plays a model, scripted by a scenario (docs/scenarios.md).

    with SimServer(load_scenario("explore-basic"), api_key=key, served_log=path) as sim:
        base_url = sim.base_url   # http://127.0.0.1:PORT — /v1/chat/completions, /v1/responses, …

It is a simulator: replies come from the scenario, never from a model. Stdlib only
(http.server in a daemon thread) so that starting one costs a few milliseconds and a test or
a dispatch can run its own. Every response is appended to `served_log` (one JSON line) so
tests can check that a run's token counts equal what the sim served.
"""

from __future__ import annotations

import hmac
import importlib
import json
import socket
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.sim import limits
from pilothouse.providers.sim.engine import Outcome, respond
from pilothouse.providers.sim.request import SimRequest
from pilothouse.providers.sim.resets import ResetBook
from pilothouse.providers.sim.scenario import ErrorCue, Scenario, ServerSpec, load_scenario

__all__ = ["SimServer", "load_scenario", "LOOPBACK"]

LOOPBACK = ("127.0.0.1", "localhost")
MODEL_IDS = ("sim-1",)
# endpoint suffix -> wire module (matched on the path's end, so /v1/… and bare paths both work)
ROUTES = (
    ("/chat/completions", "wire_openai_chat"),
    ("/responses", "wire_responses"),
    ("/messages", "wire_anthropic"),
)


def _wire(path: str) -> ModuleType | None:
    for suffix, name in ROUTES:
        if path.endswith(suffix):
            return importlib.import_module(f"pilothouse.providers.sim.{name}")
    return None


class SimServer:
    def __init__(self, scenario: Scenario | str | Path, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, served_log: str | Path | None = None,
                 resets_file: str | Path | None = None, root: str | Path | None = None,
                 server: ServerSpec | None = None, warn: Callable[[str], object] | None = None) -> None:
        if host not in LOOPBACK:
            raise UserError(f"sim: host {host} refused — the simulator listens on 127.0.0.1 only")
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.host = "127.0.0.1"
        self.port = port
        self.api_key = api_key
        self.served_log = Path(served_log) if served_log else None
        self._log_refused = False
        # where a refusal is said: the operator's stderr, or the caller that planted the link on purpose
        # (the probe's hostile check), which turns it into evidence rather than an alarm
        self.warn = warn or sys.stderr.write
        self.root = str(root) if root is not None else None  # see SimRequest.root
        # the real server's gaps it imitates (imitate.py): this, else the scenario's `server:`
        self.server = server if server is not None else self.scenario.server
        self.resets = ResetBook(Path(resets_file) if resets_file else paths.state_dir() / "sim" / "resets.json")
        self.failed: dict[str, str] = {}  # runs whose scripted action could not apply (engine.respond)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._log_lock = threading.Lock()
        self.stopping = threading.Event()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("SimServer not started")
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def start(self) -> str:
        if self._httpd is None:
            try:
                self._httpd = _HTTPServer((self.host, self.port), _Handler, self)
            except OSError as exc:
                raise UserError(f"sim: cannot listen on {self.host}:{self.port}: {exc.strerror} "
                                f"(pick another --port, or 0 for a free one)") from None
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                            name="pilothouse-sim", daemon=True)
            self._thread.start()
        return self.base_url

    def stop(self) -> None:
        self.stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        # shutdown() waits for the serve loop's next poll; a throwaway connection wakes it at once
        closer = threading.Thread(target=httpd.shutdown, daemon=True)
        closer.start()
        try:
            socket.create_connection((self.host, int(httpd.server_address[1])), timeout=0.2).close()
        except OSError:
            pass
        closer.join()
        httpd.server_close()

    def __enter__(self) -> SimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, wire: str, outcome: Outcome | None, status: int, req: SimRequest | None,
               fault: str | None = None) -> None:
        if self.served_log is None:
            return
        usage = outcome.reply.usage.as_dict() if outcome is not None and status == 200 and not fault else \
            {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0, "cache_write": 0}
        entry: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "wire": wire, "scenario": self.scenario.name,
            "script": outcome.script if outcome else None, "turn": outcome.turn if outcome else None,
            "usage": usage, "status": status,
            "model": req.model if req else None, "stream": req.stream if req else None,
            "tools": len(req.tools) if req else 0,
        }
        if outcome is not None and status == 200:
            entry["finish"] = outcome.reply.finish
            entry["usage_sent"] = outcome.reply.show_usage  # False: the client had to count or estimate
        if fault:
            entry["fault"] = fault
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        from pilothouse.providers import workerfs

        with self._log_lock:
            # the log sits in the run's state folder, the worker's to write: appended through the
            # door, so a link or FIFO planted in its place is never written through or blocked on
            log = self.served_log
            log.parent.mkdir(parents=True, exist_ok=True)
            if not workerfs.append(log.parent, log.name, line) and not self._log_refused:
                self._log_refused = True
                self.warn(f"pilothouse sim: {log} is not a regular file of its own (a link, FIFO "
                                 "or hard link put there); the served log is not written\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, sim: SimServer) -> None:
        self.sim = sim
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pilothouse-sim/1 (simulator)"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # each SSE frame is its own small write; without NODELAY, Nagle + delayed ACK add ~40 ms a response
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the served log is the record
        pass

    # --- plumbing -------------------------------------------------------------------------------

    def _path(self) -> str:
        return urlsplit(self.path).path.rstrip("/") or "/"

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _authorized(self) -> bool:
        key = self.server.sim.api_key
        if key is None:
            return True
        given = self.headers.get("x-api-key") or ""
        auth = self.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = given or auth[7:].strip()
            if hmac.compare_digest(auth[7:].strip().encode(), key.encode()):
                return True
        return bool(given) and hmac.compare_digest(given.encode(), key.encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _cut(self) -> None:
        """Drop the connection mid-response (the close_mid_stream fault)."""
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- endpoints ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self._path()
        if path.endswith("/models"):
            self._send_json(200, models_body())
        elif path in ("/", "/v1", "/health"):
            self._send_json(200, {"ok": True, "simulator": True, "scenario": self.server.sim.scenario.name,
                                  "note": "pilothouse sim: a simulated model server, replies are scripted"})
        else:
            self._send_json(404, {"error": {"message": f"sim: no endpoint {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a sim bug must reach the client as a 500, not as a dropped socket
            self.close_connection = True
            try:
                self._send_json(500, {"error": {"message": f"sim: internal error: {type(exc).__name__}: {exc}",
                                                "type": "api_error"}})
            except OSError:
                pass

    def _post(self) -> None:
        path = self._path()
        raw = self._read_body()
        sim = self.server.sim
        counting = path.endswith("/messages/count_tokens")
        wire = _wire(path.removesuffix("/count_tokens"))
        if wire is None:
            self._send_json(404, {"error": {"message": f"sim: no endpoint {path}", "type": "not_found"}})
            return
        if not self._authorized():
            message, code = limits.error_message(401, None)
            if not counting:
                sim.record(wire.NAME, None, 401, None)
            self._send_json(401, wire.error_body(401, message, code, None), {"x-should-retry": "false"})
            return
        if counting:  # Claude Code may ask before sending; not a served answer, so not recorded
            self._send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
            req: SimRequest = wire.parse(body)
        except (ValueError, TypeError, AttributeError) as exc:
            sim.record(wire.NAME, None, 400, None)
            self._send_json(400, wire.error_body(400, f"sim: request body is not valid: {exc}",
                                                 "invalid_request_error", None))
            return
        req.root = sim.root
        outcome = respond(sim.scenario, req, sim.resets, failed=sim.failed, server=sim.server)
        if outcome.delay_s and sim.stopping.wait(outcome.delay_s):
            self.close_connection = True  # stopped while waiting: hang up instead of answering
            return
        if outcome.error is not None:
            self._error(wire, outcome, req, outcome.error)
        elif req.stream:
            self._stream(wire, outcome, req)
        else:
            self._whole(wire, outcome, req)

    def _error(self, wire: ModuleType, outcome: Outcome, req: SimRequest, cue: ErrorCue) -> None:
        message, code = limits.error_message(cue.status, cue)
        headers = limits.rate_limit_headers(cue) if cue.status == 429 else {}
        if cue.status == 401:
            headers["x-should-retry"] = "false"
        # recorded before the client can see the answer end, so a finished client finds its record
        self.server.sim.record(wire.NAME, outcome, cue.status, req)
        self._send_json(cue.status, wire.error_body(cue.status, message, code, cue), headers)

    def _stream(self, wire: ModuleType, outcome: Outcome, req: SimRequest) -> None:
        frames: list[bytes] = wire.stream_frames(outcome.reply, req)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        record = self.server.sim.record
        if outcome.fault == "close_mid_stream":
            for frame in frames[:max(1, len(frames) // 3)]:
                self._chunk(frame)
            record(wire.NAME, outcome, 200, req, outcome.fault)
            self._cut()
            return
        if outcome.fault == "garbage":
            self._chunk(frames[0])
            self._chunk(b"data: \x00\x01<<sim garbage>> {not json]]\n\n")
            self._chunk(b"\xff\xfe garbage without framing \x00\n\n")
            self._chunk(b"data: {\"choices\": [{\"delta\": \n\n")
            record(wire.NAME, outcome, 200, req, outcome.fault)
        else:
            for frame in frames[:-1]:
                self._chunk(frame)
            # recorded before the final frame: a client that saw the end finds its record written
            record(wire.NAME, outcome, 200, req, outcome.fault)
            self._chunk(frames[-1])
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _whole(self, wire: ModuleType, outcome: Outcome, req: SimRequest) -> None:
        data = json.dumps(wire.body(outcome.reply, req)).encode()
        if outcome.fault == "garbage":
            data = b"<html>\x00sim garbage {not json]]"
        self.server.sim.record(wire.NAME, outcome, 200, req, outcome.fault)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if outcome.fault == "close_mid_stream":
            self.wfile.write(data[: len(data) // 2])
            self._cut()
        else:
            self.wfile.write(data)


def models_body() -> dict[str, Any]:
    """GET /v1/models, readable by OpenAI- and Anthropic-style clients alike."""
    data = [{"id": m, "object": "model", "type": "model", "created": 0, "created_at": "2026-01-01T00:00:00Z",
             "owned_by": "pilothouse-sim", "display_name": f"{m} (pilothouse simulator)"} for m in MODEL_IDS]
    # "models": [] keeps Codex's model-catalog fetch (GET /models) content with an empty list
    return {"object": "list", "data": data, "models": [], "has_more": False, "first_id": data[0]["id"],
            "last_id": data[-1]["id"], "note": "simulator: scripted replies from a pilothouse scenario, no model"}
