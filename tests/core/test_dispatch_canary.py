"""A canary key set for the sim: delivered to the worker (the sim accepts it), yet in no child's
argv or environment and in no byte under the log and sandbox trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pilothouse.providers import paths

CANARY = "sk-canary-9f8e7d6c5b4a3210"


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                parents[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def test_canary_key_never_leaks(cli, git_repo, tmp_path):
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    task = tmp_path / "t.md"
    task.write_text("Explain src/calc.py.\n")
    # 1. the key reaches the worker: the sim was started with it and answers 401 to anything else
    r = cli("dispatch", "--provider", "sim", "--mode", "explore", "--workdir", str(git_repo),
            "--task-file", str(task))
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["verdict"] == "completed", v
    # 2. while a (slow) run is live, no child carries it in argv or environment
    p = subprocess.Popen([sys.executable, "-m", "pilothouse", "dispatch", "--provider", "sim", "--mode", "code",
                          "--workdir", str(git_repo), "--task-file", str(task), "--scenario", "slow",
                          "--timeout", "2.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    json.loads(p.stdout.readline())
    seen: set[int] = set()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        for pid in _descendants(p.pid):
            for what in ("cmdline", "environ"):
                try:
                    data = Path(f"/proc/{pid}/{what}").read_bytes()
                except OSError:
                    continue
                seen.add(pid)
                assert CANARY.encode() not in data, (pid, what)
        time.sleep(0.1)
    assert seen, "no child process was observed"
    rest, err = p.communicate(timeout=20)
    assert json.loads(rest.splitlines()[-1])["timed_out"] is True
    # 3. not a byte of it under logs or sandboxes (the key file itself lives in secrets_dir)
    hits = []
    for base in (paths.logs_dir(), paths.providers_dir()):
        for f in base.rglob("*"):
            if f.is_file() and not f.is_symlink() and CANARY.encode() in f.read_bytes():
                hits.append(str(f))
    assert hits == []
    assert CANARY not in r.stdout + r.stderr + rest + err
    key_file = paths.secrets_dir() / "sim.key"
    assert key_file.read_text().strip() == CANARY and oct(key_file.stat().st_mode & 0o777) == "0o600"
