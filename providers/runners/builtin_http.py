"""A lean OpenAI chat-completions client for the builtin worker: a tiny HTTP/1.1 client plus an
SSE reader.

Why not the `openai` SDK or httpx: the whole builtin explore run has a 0.3 s budget, and the
worker is a fresh process per run. The SDK takes ~0.8 s to import here and httpx ~0.15 s; even
http.client costs ~25 ms (it imports the email package). builtin_wire.py does what we need on a
bare socket. Stdlib only: the worker must not pull in pydantic or anything else heavy.
"""

from __future__ import annotations

import json
import time

TYPE_CHECKING = False  # typing costs the worker's start-up ~5 ms; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    from pilothouse.providers.runners.builtin_wire import (
        CaFileError,
        Connection,
        ProxyRefused,
        Response,
        WireError,
    )
except ImportError:  # run as a plain script by the worker (see builtin_worker.py)
    from builtin_wire import CaFileError, Connection, ProxyRefused, Response, WireError  # type: ignore[no-redef]
try:
    from pilothouse.providers.runners.builtin_stream import ToolCalls
except ImportError:
    from builtin_stream import ToolCalls  # type: ignore[no-redef]


class ChatError(Exception):
    def __init__(self, message: str, error_class: str, quota: dict[str, Any] | None = None,
                 reached: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class  # auth | quota | transient | fatal
        self.quota = quota
        # the request was written and the server may have worked on it (a timeout, a reset, a 5xx,
        # a stream that broke off): its tokens are unknown, never 0 (docs/contracts.md, Usage)
        self.reached = reached


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime  # lazy: only quota answers carry reset times

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reset_from_headers(h: dict[str, str]) -> str | None:
    """Best-effort reset time from the headers vendors actually send."""
    for name in ("x-pilothouse-reset-at", "anthropic-ratelimit-unified-reset", "x-codex-primary-reset-at",
                 "anthropic-ratelimit-requests-reset", "x-ratelimit-reset"):
        v = h.get(name)
        if not v:
            continue
        if v.isdigit():
            n = int(v)
            return _iso(n if n > 1_000_000_000 else time.time() + n)
        if "T" in v:
            return v
    ra = h.get("retry-after")
    if ra:
        if ra.strip().isdigit():
            return _iso(time.time() + int(ra.strip()))
        from email.utils import parsedate_to_datetime  # lazy: the email package is slow to import

        try:
            return _iso(parsedate_to_datetime(ra).timestamp())
        except (TypeError, ValueError):
            pass
    v = h.get("x-ratelimit-reset-requests") or h.get("x-ratelimit-reset-tokens")
    if v:  # OpenAI's "6m0s" / "20ms" durations
        total, num = 0.0, ""
        units = {"h": 3600.0, "m": 60.0, "s": 1.0}
        i = 0
        while i < len(v):
            c = v[i]
            if c.isdigit() or c == ".":
                num += c
            elif v[i:i + 2] == "ms":
                total += float(num or 0) / 1000
                num, i = "", i + 1
            elif c in units:
                total += float(num or 0) * units[c]
                num = ""
            i += 1
        return _iso(time.time() + total)
    return None


def quota_from_headers(h: dict[str, str]) -> dict[str, Any]:
    window = (h.get("x-pilothouse-window") or h.get("anthropic-ratelimit-unified-representative-claim")
              or "rate_limit")
    used = h.get("x-pilothouse-used-pct") or h.get("x-codex-primary-used-percent")
    try:
        used_pct = float(used) if used is not None else None
    except ValueError:
        used_pct = None
    return {"window": window, "used_pct": used_pct, "resets_at": _reset_from_headers(h)}


def _error_text(raw: bytes) -> str:
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message") if isinstance(err, dict) else err
        return str(msg)[:300]
    except (ValueError, AttributeError):
        return raw.decode("utf-8", "replace").strip()[:200]


class ChatClient:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float,
                 on_progress: Callable[[], None] | None = None, proxy: dict[str, Any] | None = None,
                 ca_pem: str | None = None) -> None:
        scheme, _, rest = base_url.partition("://")
        hostport, _, path = rest.partition("/")
        if hostport.startswith("["):  # [::1]:8080
            host, _, after = hostport[1:].partition("]")
            port = after.lstrip(":")
        else:
            host, _, port = hostport.partition(":")
        if scheme not in ("http", "https") or not host or (port and not port.isdigit()):
            raise ChatError(f"base_url {base_url!r} is not an http(s) URL", "fatal")
        self.base_url = base_url
        self.https = scheme == "https"
        self.path = "/" + (path.rstrip("/") + "/" if path.strip("/") else "") + "chat/completions"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.on_progress = on_progress
        self.proxy = proxy
        self._conn = Connection(host, int(port or (443 if self.https else 80)), self.https,
                                timeout_s, proxy, ca_pem)

    def close(self) -> None:
        self._conn.close()

    @property
    def root(self) -> str:
        """The server's path prefix before its OpenAI routes (`/v1`), where its own endpoints live."""
        prefix = self.path[: -len("chat/completions")].rstrip("/")
        return prefix[: -len("/v1")] if prefix.endswith("/v1") else prefix

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """A small JSON request to another endpoint of the same server (its tokenizer), over the same
        connection, proxy and TLS; None when it fails in any way (the caller then estimates)."""
        headers = {"Content-Type": "application/json", "User-Agent": "pilothouse-builtin/1"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            resp = self._conn.post(path, json.dumps(body).encode(), headers)
            raw = resp.read()
            if resp.will_close:
                self.close()
            return json.loads(raw) if resp.status == 200 else None
        except (WireError, OSError, ValueError):
            self.close()
            return None

    def _send(self, body: bytes) -> Response:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "User-Agent": "pilothouse-builtin/1"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in (0, 1):
            reused = self._conn.connected
            try:
                return self._conn.post(self.path, body, headers)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
                self.close()
                if attempt or not reused:
                    raise ChatError(f"connection to {self.base_url} closed: {exc}", "transient", reached=True) from None
                # a kept-alive connection the server had already closed: reconnect once
            except TimeoutError:
                self.close()
                raise ChatError(f"no answer from {self.base_url} within {self.timeout_s:.0f}s", "transient", reached=True) from None
            except CaFileError as exc:
                self.close()
                # dispatch checked the bundle (builtin_net.ca_bundle): this is a changed or odd one
                raise ChatError(f"the CA bundle from SSL_CERT_FILE cannot be loaded ({exc}): point it at a PEM "
                                "file of CA certificates, or unset it", "fatal") from None
            except ProxyRefused as exc:
                self.close()
                raise ChatError(f"the proxy {self._via()} refused to connect to {self.base_url} ({exc}): check "
                                f"its address and credentials in HTTPS_PROXY, or add the host to NO_PROXY",
                                "fatal" if exc.status in (403, 407) else "transient") from None
            except WireError as exc:
                self.close()
                raise ChatError(f"the endpoint at {self.base_url} did not answer HTTP ({exc})", "fatal") from None
            except OSError as exc:
                self.close()
                if type(exc).__name__ == "SSLCertVerificationError":  # ssl is imported only for https
                    raise ChatError(f"the TLS certificate of {self.base_url} was not accepted "
                                    f"({getattr(exc, 'verify_message', '') or exc}): if a proxy or your company's "
                                    "CA signs it, point SSL_CERT_FILE at that CA's PEM bundle", "fatal") from None
                via = f" through the proxy {self._via()}" if self.proxy else ""
                raise ChatError(f"cannot reach {self.base_url}{via}: {exc.strerror or exc}", "transient") from None
        raise AssertionError("unreachable")

    def _via(self) -> str:
        return str((self.proxy or {}).get("shown") or "")

    def complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One streamed completion, assembled: {text, reasoning, tool_calls, usage, finish_reason}."""
        resp = self._send(json.dumps(payload).encode())
        status = resp.status
        if status != 200:
            try:
                raw = resp.read()
            except (WireError, OSError):
                raw = b""
            self.close()
            detail = _error_text(raw)
            if status in (401, 403):
                raise ChatError(f"authentication failed (HTTP {status}): {detail}", "auth")
            if status == 429:
                q = quota_from_headers(resp.headers)
                raise ChatError(f"quota or rate limit reached (HTTP 429, {q['window']}): {detail}", "quota", q)
            if status >= 500:
                raise ChatError(f"server error HTTP {status}: {detail}", "transient", reached=True)
            raise ChatError(f"request refused (HTTP {status}): {detail}", "fatal")
        ctype = (resp.headers.get("content-type") or "").lower()
        try:
            if "text/event-stream" in ctype:
                return self._read_stream(resp)
            raw = resp.read()
        except (WireError, ConnectionError) as exc:
            self.close()
            raise ChatError(f"the stream from {self.base_url} broke off ({type(exc).__name__})", "transient",
                            reached=True) from None
        except TimeoutError:
            self.close()
            raise ChatError(f"the stream from {self.base_url} stalled for {self.timeout_s:.0f}s", "transient",
                            reached=True) from None
        try:
            data = json.loads(raw)
            msg = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            self.close()
            raise ChatError(f"the endpoint at {self.base_url} did not answer with chat completions "
                            f"(got {raw[:80]!r})", "fatal") from None
        return {"text": msg.get("content") or "", "reasoning": msg.get("reasoning_content") or "",
                "tool_calls": msg.get("tool_calls") or [], "usage": data.get("usage") or {},
                "timings": data.get("timings") or {}, "finish_reason": data["choices"][0].get("finish_reason"),
                "streamed": False}

    def _read_stream(self, resp: Response) -> dict[str, Any]:
        text: list[str] = []
        reasoning: list[str] = []
        calls = ToolCalls()
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}  # llama.cpp's own counts, sent even when usage is not
        finish = None
        done = False
        last_progress = time.monotonic()
        for line in resp.lines():
            now = time.monotonic()
            if self.on_progress is not None and now - last_progress > 1.0:
                last_progress = now
                self.on_progress()
            line = line.strip()
            if not line or line.startswith(b":") or not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                self.close()
                raise ChatError(f"the endpoint at {self.base_url} sent a stream chunk that is not JSON "
                                f"({data[:80]!r})", "fatal") from None
            if not isinstance(chunk, dict):
                raise ChatError(f"unexpected stream chunk from {self.base_url}: {data[:80]!r}", "fatal")
            if chunk.get("error"):
                raise ChatError(f"the endpoint reported an error mid-stream: {_error_text(data)}", "transient",
                                reached=True)
            if chunk.get("usage"):
                usage = chunk["usage"]
            if isinstance(chunk.get("timings"), dict):
                timings = chunk["timings"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
                for tc in delta.get("tool_calls") or []:
                    calls.add(tc)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        if not done and finish is None:
            self.close()
            raise ChatError(f"the stream from {self.base_url} closed before the answer finished", "transient",
                            reached=True)
        try:
            resp.read()  # finish the body so the kept-alive connection can carry the next turn
        except (WireError, OSError):
            self.close()
        if resp.will_close:
            self.close()
        return {"text": "".join(text), "reasoning": "".join(reasoning),
                "tool_calls": calls.calls(), "usage": usage, "timings": timings,
                "finish_reason": finish, "streamed": True}
