"""The recording proxy in front of the model server: it forwards every byte unchanged, one exchange
at a time, and keeps per request what was asked, how the answer ended and what the server itself
counted.

llama.cpp's server streams without `usage` (even when asked), so its own counts come from its log:
per completion it prints the prompt tokens it evaluated (after a prefix-cache hit, which it also
logs) and the decode runs. One exchange at a time makes each log slice belong to one request (and
keeps the server's interrupt-on-new-request from cutting a stream short).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from support import guard

_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_CACHED = "Llama.generate: full prompt already cached"
_PROMPT = re.compile(r"^llama_perf_context_print:\s+prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", re.M)
_EVAL = re.compile(r"^llama_perf_context_print:\s+eval time =\s*[\d.]+ ms /\s*(\d+) runs", re.M)


@dataclass
class Exchange:
    """One request through the proxy and what the server said and counted for it."""

    path: str
    request: dict[str, Any] | None
    status: int = 0
    text: str = ""
    tool_calls: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None     # what the answer itself carried (streams: none)
    prompt_tokens: int = 0                  # the server's own count, from its log
    completion_tokens: int = 0
    exact: bool = True                      # False where the log cannot tell the prompt's size
    log: str = ""

    @property
    def worker(self) -> bool:
        """A turn of pilothouse's builtin worker (its system prompt), not a probe or a check."""
        msgs = (self.request or {}).get("messages") or []
        first = msgs[0] if msgs and isinstance(msgs[0], dict) else {}
        return first.get("role") == "system" and str(first.get("content", "")).startswith("You are a pilothouse worker")

    def mentions(self, needle: str) -> bool:
        return needle in json.dumps((self.request or {}).get("messages") or [])


def server_counts(log: str, ex: Exchange) -> None:
    """The server's prompt and completion tokens for one completion, from its log slice."""
    prompts = _PROMPT.findall(log)
    runs = _EVAL.findall(log)
    if not prompts or not runs:
        return  # refused before any token was evaluated (e.g. over the context window)
    if len(prompts) != 1:
        ex.exact = False  # a chat format that runs several completions per request
    hit = _PREFIX.search(log)
    ex.prompt_tokens = sum(int(p) for p in prompts) + (int(hit.group(1)) if hit else 0)
    if _CACHED in log:
        ex.exact = False
    # llama.cpp decodes every kept token but the last one sampled when the cap cut the answer off;
    # a stop at the end-of-turn token keeps nothing it did not decode (and reports at least 1 run)
    n = int(runs[-1])
    if ex.finish_reason == "length":
        n += 1
    elif not ex.text and not ex.tool_calls:
        n = 0
    ex.completion_tokens = n


def _parse_answer(ex: Exchange, ctype: str, body: bytes) -> None:
    if "text/event-stream" in ctype:
        texts: list[str] = []
        calls: set[int] = set()
        for line in body.decode("utf-8", "replace").splitlines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                continue
            if chunk.get("usage"):
                ex.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                texts.append(delta.get("content") or "")
                calls.update(int(c.get("index", 0)) for c in delta.get("tool_calls") or [])
                ex.finish_reason = choice.get("finish_reason") or ex.finish_reason
        ex.text, ex.tool_calls = "".join(texts), len(calls)
        return
    try:
        data = json.loads(body)
        choice = data["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return
    msg = choice.get("message") or {}
    ex.text = msg.get("content") or ""
    ex.tool_calls = len(msg.get("tool_calls") or [])
    ex.finish_reason = choice.get("finish_reason")
    ex.usage = data.get("usage")


_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port: int, server_log: Path) -> None:
        self.upstream_port = upstream_port
        self.server_log = server_log
        self.exchanges: list[Exchange] = []
        self.one_at_a_time = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def mark(self) -> int:
        return len(self.exchanges)

    def since(self, mark: int) -> list[Exchange]:
        with self.one_at_a_time:  # an exchange still streaming belongs to whoever asks next
            return list(self.exchanges[mark:])

    def _log_size(self) -> int:
        return self.server_log.stat().st_size

    def _log_since(self, offset: int, want_perf: bool) -> str:
        deadline = time.monotonic() + guard(5)
        while True:
            with self.server_log.open("rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", "replace")
            # the timings come after the last token; wait for them to reach the file
            if not want_perf or _EVAL.search(text) or time.monotonic() > deadline:
                return text
            time.sleep(0.05)


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, body: bytes) -> None:
        rec = self.server
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        ex = Exchange(self.path, request)
        with rec.one_at_a_time:
            offset = rec._log_size()
            up = http.client.HTTPConnection("127.0.0.1", rec.upstream_port, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            up.request(self.command, self.path, body=body or None, headers=headers)
            resp = up.getresponse()
            ex.status = resp.status
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            kept = bytearray()
            try:
                while chunk := resp.read1(65536):
                    kept += chunk
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the worker went away (stopped or timed out)
            finally:
                up.close()
            _parse_answer(ex, resp.getheader("Content-Type") or "", bytes(kept))
            completion = self.path.endswith("/completions") and resp.status == 200
            ex.log = rec._log_since(offset, want_perf=completion)
            if completion:
                server_counts(ex.log, ex)
            rec.exchanges.append(ex)
