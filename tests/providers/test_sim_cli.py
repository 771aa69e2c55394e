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


def test_serve_answers_then_exits_cleanly_on_sigint(tmp_path: Path) -> None:
    served = tmp_path / "served.jsonl"
    key = tmp_path / "key"
    key.write_text("sk-sim-test\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pilothouse", "sim", "serve", "--scenario", "explore-basic",
         "--served-log", str(served), "--api-key-file", str(key)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "simulated model server, loopback only" in banner and "scenario explore-basic" in banner
        url = re.search(r"http://127\.0\.0\.1:\d+", banner).group(0)
        resp = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": "Bearer sk-sim-test"},
                          json={"model": "sim-1", "messages": [{"role": "user", "content": "[pilothouse mode: explore]"}],
                                "tools": [{"type": "function", "function": {"name": "read", "parameters": {
                                    "type": "object", "properties": {"path": {"type": "string"}}}}}]}, timeout=10)
        assert resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err
    assert json.loads(served.read_text())["status"] == 200


def test_list_json_and_refusals(cli) -> None:
    res = cli("sim", "list", "--json")
    assert res.returncode == 0
    names = {row["name"] for row in json.loads(res.stdout)}
    assert {"explore-basic", "code-basic", "quota-429"} <= names
    res = cli("sim", "serve", "--scenario", "explore-basic", "--host", "0.0.0.0")
    assert res.returncode == 2 and "127.0.0.1 only" in res.stderr and "Traceback" not in res.stderr
    res = cli("sim", "serve", "--scenario", "no-such-scenario")
    assert res.returncode == 2 and "unknown scenario 'no-such-scenario'" in res.stderr
