"""`pilothouse sim serve` / `sim list` as a user runs them (real subprocess, real signals)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from support import guard

# the sim is on loopback: never route it through a proxy from the environment
HTTP = httpx.Client(trust_env=False, timeout=guard(10))


def test_serve_answers_then_exits_cleanly_on_sigint(tmp_path: Path) -> None:
    served = tmp_path / "served.jsonl"
    key = tmp_path / "key"
    key.write_text("sk-sim-test\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilothouse", "sim", "serve", "--scenario", "explore-basic",
         "--served-log", str(served), "--api-key-file", str(key)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        # started as a script's background job is: SIGINT ignored, which Python then never raises on its own
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "simulated model server, loopback only" in banner and "scenario explore-basic" in banner
        url = re.search(r"http://127\.0\.0\.1:\d+", banner).group(0)
        resp = HTTP.post(f"{url}/v1/chat/completions", headers={"authorization": "Bearer sk-sim-test"},
                          json={"model": "sim-1", "messages": [{"role": "user", "content": "[pilothouse mode: explore]"}],
                                "tools": [{"type": "function", "function": {"name": "read", "parameters": {
                                    "type": "object", "properties": {"path": {"type": "string"}}}}}]}, timeout=guard(10))
        assert resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=guard(10))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err
    assert json.loads(served.read_text())["status"] == 200


def test_list_json_and_refusals(capsys) -> None:
    from pilothouse.core.cli import main

    # in-process (the same main() the console script runs): cheap, and the serve test above covers a real process
    assert main(["sim", "list", "--json"]) == 0
    names = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert {"explore-basic", "code-basic", "quota-429"} <= names
    assert main(["sim", "serve", "--list"]) == 0
    assert "quota-429" in capsys.readouterr().out
    assert main(["sim", "serve", "--scenario", "explore-basic", "--host", "0.0.0.0"]) == 2
    assert "127.0.0.1 only" in capsys.readouterr().err
    assert main(["sim", "serve", "--scenario", "no-such-scenario"]) == 2
    assert "unknown scenario 'no-such-scenario'" in capsys.readouterr().err
    assert main(["sim", "serve"]) == 2
    assert "--scenario NAME is required" in capsys.readouterr().err
