"""The real model server of tests/realmodel: llama.cpp's OpenAI-compatible server (llama-cpp-python,
built by scripts/install-model-server) with the SmolLM2-135M-Instruct GGUF, on loopback, behind the
recorder (recorder.py) that keeps what the server saw and counted.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recorder import Exchange, Recorder
from support import guard

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL = REPO_ROOT / "scripts" / "install-model-server"
ALIAS = "smollm2-135m-instruct"
N_CTX = 2048
# guards against a hang only, generous for a machine that other work keeps busy: the verdict never
# depends on them (ready is the server answering, an answer is its whole reply)
READY_S = 900
ANSWER_S = 1800


class NotInstalled(Exception):
    """One line for the operator: what is missing and the command that installs it."""


class NotAnswering(Exception):
    """One line: the server started but could not answer a chat completion."""


def install_dir(env: dict[str, str]) -> Path:
    """Where scripts/install-model-server keeps the build (PILOTHOUSE_TEST_MODEL_SERVER, which
    scripts/test sets, else the script's own answer for this environment)."""
    given = env.get("PILOTHOUSE_TEST_MODEL_SERVER")
    if given:
        return Path(given)
    out = subprocess.run([str(INSTALL), "--where"], capture_output=True, text=True, env=env, timeout=guard(30))
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

    def check_answers(self) -> None:
        """One real completion, straight from the server, before the suite relies on it: a build
        that crashes on its first decode (llama.cpp's weight repacking did on some CPUs) would
        otherwise close every test's connection with a traceback of its own."""
        why = None
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=ANSWER_S)
            conn.request("POST", "/v1/chat/completions", body=json.dumps(
                {"model": ALIAS, "messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 4}),
                headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status != 200 or not json.loads(body).get("choices"):
                why = f"HTTP {resp.status}: {body[:200]!r}"
        except (OSError, http.client.HTTPException, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            return
        assert self.proc is not None
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        state = f"it exited with {code}" if code is not None else "it is still running"
        last = next((line for line in reversed(self.log_tail(40).splitlines()) if line.strip()), "")
        raise NotAnswering(f"llama.cpp's server ({self.python.parent.parent}) could not answer one chat completion "
                           f"({why}); {state}; its log: {self.log} (last line: {last[:200]}); rebuild it with "
                           "scripts/install-model-server after removing that folder")

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def chat(self, messages: list[dict[str, str]], max_tokens: int, stream: bool = False) -> tuple[dict[str, Any], Exchange]:
        """One request through the recorder (the fixture's own check of the server's counts)."""
        assert self.recorder is not None
        mark = self.recorder.mark()
        conn = http.client.HTTPConnection("127.0.0.1", self.recorder.server_address[1], timeout=ANSWER_S)
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
