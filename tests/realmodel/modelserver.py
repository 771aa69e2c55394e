"""The real model server of tests/realmodel: llama.cpp's OpenAI-compatible server (llama-cpp-python,
built by scripts/install-model-server) with the SmolLM2-135M-Instruct GGUF, on loopback.

In front of it a recording proxy forwards every byte unchanged, one exchange at a time, and keeps
per request what was asked, how the answer ended and what the server itself counted. The server
streams without `usage` (even when asked), so its own counts come from its log: llama.cpp prints,
per completion, the prompt tokens it evaluated (after a prefix-cache hit, which it also logs) and
the decode runs. One exchange at a time makes each log slice belong to one request (and keeps the
server's interrupt-on-new-request from cutting a stream short).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL = REPO_ROOT / "scripts" / "install-model-server"
ALIAS = "smollm2-135m-instruct"
N_CTX = 2048
READY_S = 180

_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_CACHED = "Llama.generate: full prompt already cached"
_PROMPT = re.compile(r"^llama_perf_context_print:\s+prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", re.M)
_EVAL = re.compile(r"^llama_perf_context_print:\s+eval time =\s*[\d.]+ ms /\s*(\d+) runs", re.M)


class NotInstalled(Exception):
    """One line for the operator: what is missing and the command that installs it."""


def install_dir(env: dict[str, str]) -> Path:
    """Where scripts/install-model-server keeps the build (PILOTHOUSE_TEST_MODEL_SERVER, which
    scripts/test sets, else the script's own answer for this environment)."""
    given = env.get("PILOTHOUSE_TEST_MODEL_SERVER")
    if given:
        return Path(given)
    out = subprocess.run([str(INSTALL), "--where"], capture_output=True, text=True, env=env, timeout=30)
    if out.returncode != 0:
        raise NotInstalled(f"scripts/install-model-server --where failed: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def installed(env: dict[str, str]) -> tuple[Path, Path]:
    """(python, gguf) of a finished build, or NotInstalled naming the script that builds it."""
    where = install_dir(env)
    stamp = where / ".installed"
    fix = f"the real-model tests need llama.cpp's server and the SmolLM2 GGUF: run scripts/install-model-server (no build in {where})"
    if not stamp.is_file():
        raise NotInstalled(fix)
    fields = dict(line.split("=", 1) for line in stamp.read_text().splitlines() if "=" in line)
    python, gguf = where / "bin" / "python", Path(fields.get("gguf", ""))
    if not (python.exists() and gguf.is_file()):
        raise NotInstalled(fix)
    return python, gguf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        deadline = time.monotonic() + 5
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


class ModelServer:
    """`python -m llama_cpp.server` on a free loopback port, and the recorder in front of it."""

    def __init__(self, python: Path, gguf: Path, workdir: Path) -> None:
        self.python, self.gguf, self.workdir = python, gguf, workdir
        self.port = free_port()
        self.log = workdir / "llama-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.recorder: Recorder | None = None

    @property
    def url(self) -> str:
        assert self.recorder is not None
        return self.recorder.url

    def argv(self) -> list[str]:
        # the model's own chat template (what a bare `--model X` serves); one thread, as on a loaded
        # CI machine; logits only for the last token, or every prompt token pays the 49k-word output
        # layer; a fixed seed, so the same prompt gets the same answer from run to run
        return [str(self.python), "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", ALIAS,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(N_CTX), "--seed", "7",
                "--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "False", "--verbose", "True"]

    def start(self) -> None:
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1"}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.workdir, env=env, start_new_session=True)
        deadline = time.monotonic() + READY_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode} before it was ready:\n"
                                   + self.log_tail())
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/v1/models")
                ok = conn.getresponse().status == 200
                conn.close()
                if ok:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server not ready on port {self.port} within {READY_S}s:\n"
                                   + self.log_tail())
            time.sleep(0.5)
        self.recorder = Recorder(self.port, self.log)
        threading.Thread(target=self.recorder.serve_forever, daemon=True).start()

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def chat(self, messages: list[dict[str, str]], max_tokens: int, stream: bool = False) -> tuple[dict[str, Any], Exchange]:
        """One request through the recorder (the fixture's own check of the server's counts)."""
        assert self.recorder is not None
        mark = self.recorder.mark()
        conn = http.client.HTTPConnection("127.0.0.1", self.recorder.server_address[1], timeout=300)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(
            {"model": ALIAS, "messages": messages, "max_tokens": max_tokens, "stream": stream}),
            headers={"Content-Type": "application/json"})
        raw = conn.getresponse().read()
        conn.close()
        return (json.loads(raw) if not stream else {}), self.recorder.since(mark)[-1]

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.shutdown()
            self.recorder.server_close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@dataclass
class RealModel:
    """A test's view of the server: its provider key and the exchanges since the test began."""

    server: ModelServer
    provider: str
    mark: int

    def exchanges(self) -> list[Exchange]:
        assert self.server.recorder is not None
        return self.server.recorder.since(self.mark)


def write_provider(key: str, url: str, output_tokens: int) -> Path:
    """A provider file for the server, in this test's PILOTHOUSE_HOME/config/providers/, where
    docs/providers.md tells a user to put one."""
    folder = Path(os.environ["PILOTHOUSE_HOME"]) / "config" / "providers"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.yaml"
    path.write_text(
        f"key: {key}\n"
        "provider_id: llama-cpp\n"
        f"model_id: {ALIAS}\n"
        f"base_url: {url}\n"
        "display_name: SmolLM2 135M Instruct on llama.cpp's server (tests)\n"
        "runner: builtin\n"
        f"context_tokens: {N_CTX}\n"
        f"output_tokens: {output_tokens}\n"
        "needs_key: false\n"
        "cost: {input: 0, output: 0}\n"
    )
    return path


def keep_log(server: ModelServer, dest: Path | None) -> None:
    """The server's log next to the other test artifacts, for a person to read after a failure."""
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server.log, dest / f"llama-server-{server.port}.log")
