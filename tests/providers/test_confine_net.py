"""`network: none`: a confined worker reaches its local model on the host's loopback and nothing else."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pilothouse.providers import confine
from pilothouse.providers.confine.probe import probe_spec
from pilothouse.providers.runners.base import LaunchSpec
from support import guard
from test_confine import abort_when_ready, require_confinement

PROBE_NET = r"""
import json, socket, sys, urllib.request
out = {}
for name, url in (("model", sys.argv[1]), ("other", sys.argv[2])):
    try:
        out[name] = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as exc:
        out[name] = "failed: " + type(exc).__name__
try:
    socket.create_connection(("10.255.255.1", 80), timeout=3)
    out["outside"] = "connected"
except OSError as exc:
    out["outside"] = "failed: " + (exc.strerror or type(exc).__name__)
print(json.dumps(out))
"""


def _server(body: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    model, other = _server("model-ok"), _server("other-ok")
    yield model.server_address[1], other.server_address[1]
    model.shutdown()
    other.shutdown()


def test_network_none_keeps_only_the_local_model(tmp_path: Path, servers):
    require_confinement()
    model_port, other_port = servers
    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(tmp_path / "sb", wd)
    spec.base_url = f"http://127.0.0.1:{model_port}/v1"
    launch = LaunchSpec(argv=[sys.executable, "-I", "-c", PROBE_NET, f"http://127.0.0.1:{model_port}/",
                              f"http://127.0.0.1:{other_port}/"], env={"PATH": "/usr/bin:/bin"}, cwd=wd)
    import subprocess

    # without the option the host network is there
    plain = confine.wrap(launch, spec)
    assert "--unshare-net" not in plain.argv
    seen = json.loads(subprocess.run(plain.argv, env=plain.env, capture_output=True, text=True, timeout=guard(60)).stdout)
    assert seen["model"] == "model-ok" and seen["other"] == "other-ok"
    # network: none — the model (through the relay) and nothing else
    spec.extra["network"] = "none"
    cut = confine.wrap(launch, spec)
    assert "--unshare-net" in cut.argv and "pilothouse.providers.netrelay" in cut.argv
    proc = subprocess.run(cut.argv, env=cut.env, capture_output=True, text=True, timeout=guard(60))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["model"] == "model-ok"
    assert seen["other"].startswith("failed")
    assert seen["outside"].startswith("failed")
    # this run's relay socket is gone (other tests' relays may be running in parallel: not theirs)
    assert not Path(cut.argv[cut.argv.index("--sock") + 1]).exists()


def test_network_none_cannot_apply_to_a_remote_endpoint(tmp_path: Path, capsys):
    require_confinement()
    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(tmp_path / "sb", wd)
    spec.base_url = "https://api.example.invalid/v1"
    spec.extra["network"] = "none"
    out = confine.wrap(LaunchSpec(argv=["true"], env={}, cwd=wd), spec)
    assert "--unshare-net" not in out.argv
    assert "network: none is not applied" in capsys.readouterr().err


def test_exit_code_and_graceful_abort_pass_through_the_relay(tmp_path: Path, servers):
    require_confinement()
    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(tmp_path / "sb", wd)
    spec.base_url = f"http://127.0.0.1:{servers[0]}/v1"
    spec.extra["network"] = "none"
    lines, outcome = abort_when_ready(spec)
    assert lines == ["ready", "got-TERM"] and outcome.interrupted and outcome.exit_code == 3, (lines, outcome)


def test_dispatch_with_network_none_on_the_sim(cli, git_repo: Path, tmp_path: Path):
    """A whole builtin-runner run with the project's `network: none`: the sim answers, the world does not."""
    require_confinement()
    (git_repo / ".ai").mkdir()
    (git_repo / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\nnetwork: none\n")
    scen = tmp_path / "net.yaml"
    scen.write_text(
        "name: net\ndescription: tries the network\nscripts:\n  - match: {mode: code}\n    turns:\n"
        "      - say: trying\n        actions:\n"
        "          - bash: {command: \"python3 -c \\\"import socket; socket.create_connection(('10.255.255.1', 80), "
        "timeout=3)\\\" > net.txt 2>&1 || true\"}\n"
        "      - say: |\n          done\n          <!--RESULT-->{\"status\":\"complete\",\"files_changed\":[\"net.txt\"],"
        "\"validation\":{\"commands\":[],\"passed\":true},\"risks\":[]}<!--/RESULT-->\n")
    task = tmp_path / "t.md"
    task.write_text("Check the network.\n")
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--task-file", str(task),
            "--scenario", str(scen), "--timeout", "60", "--in-place")
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["verdict"] == "completed", (v, r.stderr)
    assert "unreachable" in (git_repo / "net.txt").read_text().lower()
