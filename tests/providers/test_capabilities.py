"""The capability probe (providers/capabilities.py, capability_store.py): real requests to the sim on
loopback, through `pilothouse providers check`, recorded and shown by `pilothouse providers`."""

from __future__ import annotations

import json
from pathlib import Path

# a server that drops `tools` unless one is forced (llama.cpp with a function-calling chat format
# did exactly this), and does not follow the result-block protocol
FORCED_ONLY = """
name: forced-only
description: tool calls only when forced; no result block
scripts:
  - match: {contains: ["pilothouse capability probe: tool call (forced)"]}
    turns:
      - actions:
          - read: {path: README.md}
  - match: {contains: ["pilothouse capability probe: tool call (auto)"]}
    turns:
      - say: I would read README.md now.
  - match: {contains: ["pilothouse capability probe: result block"]}
    turns:
      - say: "Sure: probe ok."
  - turns:
      - say: OK
"""


def test_a_model_that_streams_calls_tools_and_follows_the_protocol_passes_the_probe(cli, tmp_path: Path) -> None:
    r = cli("providers", "check", "sim", cwd=tmp_path)  # outside any repository: the probe alone
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("sim: streaming=yes usage=yes tools_auto=yes tools_forced=yes protocol=yes "
            "context=128000 (provider yaml)") in r.stdout
    assert "cannot be" not in r.stdout
    [row] = [x for x in json.loads(cli("providers", "--json").stdout) if x["key"] == "sim"]
    caps = row["capabilities"]
    assert (caps["model"], caps["tools_auto"], caps["protocol"], caps["context_tokens"]) == ("sim-1", True, True, 128000)
    assert caps["probed_at"]
    table = cli("providers").stdout.splitlines()
    assert "PROBE" in table[0] and any(line.startswith("sim ") and " ok " in line for line in table)


def test_a_server_that_calls_tools_only_when_forced_is_no_builder(cli, tmp_path: Path) -> None:
    scenario = tmp_path / "forced-only.yaml"
    scenario.write_text(FORCED_ONLY)
    r = cli("providers", "check", "sim", "--scenario", str(scenario), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    [res] = json.loads(r.stdout)
    caps = res["capabilities"]
    assert (caps["streaming"], caps["tools_auto"], caps["tools_forced"], caps["protocol"]) == (True, False, True, False)
    assert caps["lacks"] == {"builder": ["tools_auto", "protocol"], "reviewer": ["protocol"],
                             "assigner": ["protocol"]}
    text = cli("providers", "check", "sim", "--scenario", str(scenario), cwd=tmp_path).stdout
    assert "sim: cannot be builder: lacks tool calls with tool_choice auto, the result-block protocol" in text
    # `providers` shows it from the record, without asking the model again
    table = cli("providers").stdout.splitlines()
    assert any(line.startswith("sim ") and " no tools_auto,protocol " in line for line in table), table


def test_an_endpoint_that_cannot_be_reached_is_reported_and_not_recorded(cli, tmp_path: Path) -> None:
    from pilothouse.providers import paths

    folder = paths.config_dir() / "providers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "deadend.yaml").write_text(
        "key: deadend\nprovider_id: local\nmodel_id: m1\nbase_url: http://127.0.0.1:9/v1\n"
        "display_name: nothing listens here\nrunner: builtin\nneeds_key: false\ncontext_tokens: 4096\n")
    r = cli("providers", "check", "deadend", "--json", cwd=tmp_path)
    assert r.returncode == 1
    [res] = json.loads(r.stdout)
    assert res["capabilities"]["error"].startswith("cannot reach http://127.0.0.1:9/v1")
    [row] = [x for x in json.loads(cli("providers", "--json").stdout) if x["key"] == "deadend"]
    assert row["capabilities"] is None


def test_an_unreachable_endpoint_is_not_asked_again_at_every_launch() -> None:
    from pilothouse.providers import capability_store, paths, provider_index

    folder = paths.config_dir() / "providers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "deadend.yaml").write_text(
        "key: deadend\nprovider_id: local\nmodel_id: m1\nbase_url: http://127.0.0.1:9/v1\n"
        "display_name: nothing listens here\nrunner: builtin\nneeds_key: false\n")
    rec = provider_index.record("deadend")
    first = capability_store.cached(rec)
    assert first["error"].startswith("cannot reach http://127.0.0.1:9/v1")
    # the supervisor asks before each launch: the failed probe is remembered, not repeated
    assert capability_store.cached(rec) is first
    assert capability_store.get("deadend", "m1") is None


def test_a_key_the_endpoint_echoes_in_its_error_never_reaches_the_output(cli, tmp_path: Path) -> None:
    key = "sk-probe-canary-7c1d9e55aa0b42f3"
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=key + "\n")
    assert r.returncode == 0, r.stderr
    scenario = tmp_path / "echo.yaml"
    scenario.write_text("name: echo\ndescription: refuses, quoting the key it was sent\nscripts:\n"
                        f"  - turns:\n      - error: {{status: 403, message: 'key {key} is not allowed here'}}\n")
    for fmt in ([], ["--json"]):
        out = cli("providers", "check", "sim", "--scenario", str(scenario), *fmt, cwd=tmp_path)
        assert out.returncode == 1 and "authentication failed (HTTP 403)" in out.stdout, out.stdout + out.stderr
        assert key not in out.stdout + out.stderr and "[REDACTED]" in out.stdout


def test_the_context_length_is_what_the_servers_model_list_says() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pilothouse.providers.capabilities import model_context

    listed: dict = {}

    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.dumps(listed).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        listed.update(data=[{"id": "other", "max_model_len": 1}, {"id": "m1", "max_model_len": 32768}])  # vLLM
        assert model_context(url, "m1", None, 5) == 32768
        listed.update(data=[{"id": "m1", "meta": {"n_ctx_train": 131072}}])  # llama.cpp's server
        assert model_context(url, "m1", None, 5) == 131072
        listed.update(data=[{"id": "m1", "owned_by": "ollama"}])  # says nothing: the provider YAML's then
        assert model_context(url, "m1", None, 5) is None
    finally:
        server.shutdown()
        server.server_close()
