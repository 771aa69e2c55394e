"""The host server's first answers, given before the MCP SDK is imported.

A host starts `pilothouse mcp` at the start of every agent session and waits for `initialize`
and `tools/list`; importing the SDK (its protocol models) takes ~0.5 s of CPU on a quiet core.
So the server answers those two (and `ping`) from a record of what the SDK itself answered
before, while a thread imports the SDK and builds the real server. The first message the record
cannot answer hands the stream over: the SDK is fed the handshake it missed (its reply to the
replayed `initialize` is dropped: the host has had it), then that message, then everything else.

The record (cache_dir()/mcp-handshake.json) is written from the real server's answers, and is
used only while its fingerprint matches: this package's sources, the SDK's installed files and
pilothouse's version. Without one (a first start, an upgrade) every message waits for the SDK,
and the record is made for the next start.

A worker's server (`--worker`) starts inside the run's sandbox, where the agent CLI gives it a
time limit and drops it for the whole run when it is late (on a loaded machine the SDK import
alone took tens of seconds). Its record is the host's: dispatch copies it from the host's cache
into the job's context folder (read-only in the sandbox) and makes it there, once, when the cache
has none (core/dispatch/handshake.py). Nothing a worker wrote is ever read as a record: a record decides
the tool descriptions every later worker's model reads.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from pilothouse.core.dispatch.handshake import (
    HOST,
    WORKER,
    WORKER_RECORD,
    fingerprint,
    load_record,
    record_path,
)

HANDSHAKE = ("initialize", "notifications/initialized", "tools/list", "ping")


class _Lines:
    """The stdin the SDK's transport reads: replayed lines first, then the wire."""

    def __init__(self, first: list[bytes], wire: Any, done: Any = None) -> None:
        self._first = list(first)
        self._wire = wire
        self._done = done  # without a wire: the end of input waits for this (the replies are in)

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        if self._first:
            return self._first.pop(0).decode("utf-8", "replace")
        import anyio

        if self._wire is None:
            with anyio.move_on_after(30):
                while self._done is not None and not self._done():
                    await anyio.sleep(0.005)
            raise StopAsyncIteration

        line = await anyio.to_thread.run_sync(self._wire.readline, abandon_on_cancel=True)
        if not line:
            raise StopAsyncIteration
        return bytes(line).decode("utf-8", "replace")


class _Out:
    """The stdout the SDK's transport writes: the wire, less the reply to a replayed initialize."""

    def __init__(self, fd: int | None, drop_id: Any = None) -> None:
        self.fd = fd
        self.drop_id = drop_id
        self.dropping = drop_id is not None
        self.lines: list[str] = []

    async def write(self, text: str) -> None:
        if self.dropping:
            try:
                msg = json.loads(text)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and msg.get("id") == self.drop_id and "method" not in msg:
                self.dropping = False
                return
        if self.fd is None:
            self.lines.append(text)
            return
        _write(self.fd, text.encode())

    async def flush(self) -> None:
        pass


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def _run(server: Any, lines: _Lines, out: _Out) -> None:
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server(stdin=lines, stdout=out) as (read, write):  # type: ignore[arg-type]
        await low.run(read, write, low.create_initialization_options())


def make_record(build: Any) -> dict[str, Any]:
    """The real server's answers to the handshake, for each protocol version it takes one in."""
    import anyio
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    answers: dict[str, Any] = {}
    server = build()  # one server serves many sessions (as over HTTP): one per version here
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "record", "version": "0"}}}
        sent = [json.dumps(m).encode() + b"\n" for m in (
            init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})]
        out = _Out(None)
        anyio.run(_run, server, _Lines(sent, None, lambda o=out: len(o.lines) >= 2), out)
        got = {m.get("id"): m for m in map(json.loads, out.lines) if isinstance(m, dict)}
        if "result" in got.get(1, {}) and "result" in got.get(2, {}):
            answers[version] = {"initialize": got[1]["result"], "tools/list": got[2]["result"]}
    return {"fingerprint": fingerprint(), "answers": answers}


def save_record(build: Any, profile: str = HOST, path: Path | None = None) -> None:
    from pilothouse.providers.fsutil import atomic_write_text

    try:
        record = {**make_record(build), "profile": profile}
        atomic_write_text(path or record_path(profile), json.dumps(record), mode=0o600, durable=False)
    except Exception as exc:  # noqa: BLE001 - the record only speeds up the next start
        print(f"pilothouse mcp: could not record the handshake for a faster next start: {exc}", file=sys.stderr)


def _build_worker() -> Any:
    from pilothouse.core.mcp.server import build

    # the worker profile's handshake names no job (its tools and instructions are the same for all)
    return build(worker_job="record", context=None)


def record(profile: str) -> int:
    """`pilothouse mcp --record PROFILE`: make the profile's record in the host's cache now (dispatch
    starts it for the worker profile when there is none: core/dispatch/handshake.py)."""
    if profile != WORKER:
        from pilothouse.providers.errors import UserError

        raise UserError(f"--record takes {WORKER!r} (the host's record is made by its first start)")
    save_record(_build_worker, WORKER)
    return 0


def _claim_stdio() -> tuple[Any, int]:
    """The wire, on private descriptors; fd 0 becomes /dev/null and fd 1 stderr, so a child a tool
    starts (a supervisor, git) reads EOF and cannot write into the JSON-RPC stream."""
    wire_in = os.fdopen(os.dup(0), "rb")
    wire_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


def serve(repo: str | None, worker_job: str | None = None, context: str | None = None) -> int:
    """The host profile on stdio, or with `worker_job` the worker's (see server.build), its
    handshake answered from the record when there is one."""
    if worker_job is not None:
        # the host's copy beside the job's records, never the sandbox's own cache (the worker's)
        record = load_record(Path(context) / WORKER_RECORD, WORKER) if context else None
    else:
        record = load_record()
    wire_in, wire_out = _claim_stdio()
    built: dict[str, Any] = {}
    ready = threading.Event()

    def build() -> Any:
        from pilothouse.core.mcp.server import build as build_server

        return build_server(repo, worker_job, context)

    def load() -> None:
        try:
            built["server"] = build()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            built["error"] = exc
        ready.set()
        if record is None and "server" in built and worker_job is None:
            save_record(build)  # for the next start; this one is already served by the SDK

    loader = threading.Thread(target=load, name="mcp-sdk", daemon=True)
    loader.start()
    answers = (record or {}).get("answers") or {}
    replay: list[bytes] = []
    init_id: Any = None
    version: str | None = None
    while True:
        line = wire_in.readline()
        if not line:
            return 0
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        method = msg.get("method") if isinstance(msg, dict) else None
        if method not in HANDSHAKE or (method != "initialize" and version is None):
            replay.append(line)  # for the SDK, with what came before
            break
        if method == "initialize":
            asked = (msg.get("params") or {}).get("protocolVersion")  # type: ignore[union-attr]
            if version is not None or asked not in answers:
                replay.append(line)
                break
            version, init_id = asked, msg.get("id")  # type: ignore[union-attr]
            replay.append(line)
            result = answers[asked]["initialize"]
        elif method == "notifications/initialized":
            replay.append(line)
            continue
        elif method == "tools/list":
            if (msg.get("params") or {}).get("cursor"):  # type: ignore[union-attr]
                replay.append(line)
                break
            result = answers[version]["tools/list"]
        else:
            result = {}
        if "id" in msg:  # type: ignore[operator]
            _write(wire_out, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result},  # type: ignore[index]
                                        separators=(",", ":")).encode() + b"\n")
    ready.wait()
    if "error" in built:
        raise built["error"]
    import anyio

    anyio.run(_run, built["server"], _Lines(replay, wire_in), _Out(wire_out, init_id if version else None))
    loader.join(timeout=10)  # a record being written: finished, for the next start
    return 0
