"""A real Claude Code and a real Codex (the pinned CLIs) as the operator's agent: on the simulated
model (tests/providers/scenarios/mcp-host.yaml) each calls pilothouse's MCP tools — create a job,
start it, wait, answer the problem the job's own scenario raises, wait again — and the job is
accepted. Each host finds the server through the config `pilothouse install host` wrote."""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
from mcp_client import sim_repo
from support import guard
from test_runner_common import require_cli

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "mcp-host.yaml"
PROMPT = "Drive the job words to acceptance. [pilothouse mode: host]"
TOOLS = ["job_create", "job_start", "job_wait", "problem_act", "job_wait"]
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
         "CLAUDE_CODE_MAX_RETRIES": "1"}


def run_claude(home: Path, repo: Path, base_url: str, key: Path) -> list[str]:
    binary = require_cli("claude-code")
    base = base_url.rstrip("/").removesuffix("/v1")  # the CLI appends /v1/messages itself
    cfg = home / ".claude"
    cfg.mkdir(exist_ok=True)
    (cfg / "settings.json").write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": base},
                                                   "apiKeyHelper": f"/bin/cat {key}"}))
    # MCP_TOOL_TIMEOUT: job_wait may block for minutes; -p cannot ask, so the server's tools are allowed;
    # -p connects MCP servers in the background: on a loaded machine its first request would go out
    # before the server's tools are listed, so it waits for them
    env = {**os.environ, **QUIET, "MCP_TOOL_TIMEOUT": "700000", "MCP_CONNECTION_NONBLOCKING": "false",
           "MCP_TIMEOUT": "60000"}
    out = subprocess.run([str(binary), "-p", PROMPT, "--output-format", "stream-json", "--verbose", "--model", "sim-1",
                          "--allowedTools", "mcp__pilothouse", "--max-turns", "12", "--setting-sources", "user"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=guard(600), stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    calls = []
    for line in out.stdout.splitlines():
        d = json.loads(line)
        for block in (d.get("message") or {}).get("content") or [] if d.get("type") == "assistant" else []:
            if block.get("type") == "tool_use":
                calls.append(block["name"].removeprefix("mcp__pilothouse__"))
        if d.get("type") == "user":
            results = [b for b in d["message"]["content"] if b.get("type") == "tool_result"]
            assert not any(b.get("is_error") for b in results), results
    return calls


def run_codex(home: Path, repo: Path, base_url: str, key: Path) -> list[str]:
    from pilothouse.providers.runners.codex import model_catalog

    binary = require_cli("codex")
    codex = home / ".codex"
    spec = types.SimpleNamespace(model="sim-1", provider=types.SimpleNamespace(display_name="sim",
                                                                                context_tokens=128000))
    (codex / "models.json").write_text(json.dumps(model_catalog(spec)))
    # -c: headless exec cannot ask, so the server's tools are approved for this run; the first
    # turn waits for the server's tool list
    argv = [str(binary), "exec", "--json", "--skip-git-repo-check", "-c",
            'mcp_servers.pilothouse.default_tools_approval_mode="approve"', "-c",
            "mcp_optional_startup_grace_ms=60000", "-C", str(repo), "-"]
    out = subprocess.run(argv, cwd=repo, input=PROMPT, capture_output=True, text=True, timeout=guard(600))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    calls = []
    for line in out.stdout.splitlines():
        d = json.loads(line)
        item = d.get("item") or {}
        if d.get("type") == "item.completed" and item.get("type") == "mcp_tool_call":
            assert item["server"] == "pilothouse" and item["status"] == "completed", item
            calls.append(item["tool"])
    return calls


def codex_user_config(home: Path, base_url: str, key: Path) -> None:
    """What the user had before `install host codex`: their model provider (here the sim)."""
    codex = home / ".codex"
    codex.mkdir()
    (codex / "config.toml").write_text(
        f'# my own settings\nmodel = "sim-1"\nmodel_provider = "sim"\n'
        f'model_catalog_json = {json.dumps(str(codex / "models.json"))}\napproval_policy = "never"\n'
        f'sandbox_mode = "read-only"\ncheck_for_update_on_startup = false\n\n'
        f'[model_providers.sim]\nname = "sim"\nbase_url = {json.dumps(base_url.rstrip("/"))}\n'
        f'wire_api = "responses"\nrequest_max_retries = 1\nstream_max_retries = 1\n\n'
        f'[model_providers.sim.auth]\ncommand = "/bin/cat"\nargs = [{json.dumps(str(key))}]\n'
        f'refresh_interval_ms = 0\n')


@pytest.mark.realcli
@pytest.mark.slow
@pytest.mark.parametrize("host", ["claude", "codex"])
def test_a_real_host_takes_a_sim_job_to_accepted_through_the_tools(cli: Any, isolated_home: Path, tmp_path: Path,
                                                                   host: str) -> None:
    from pilothouse.providers.sim.server import SimServer

    repo = sim_repo(tmp_path / "scratch", "accept")
    key = tmp_path / "sim.key"
    key.write_text("sim-" + os.urandom(8).hex())
    try:
        with SimServer(str(SCENARIO)) as sim:
            if host == "codex":
                codex_user_config(isolated_home, sim.base_url, key)
            out = cli("install", "host", host)
            assert out.returncode == 0 and "registered the pilothouse MCP server" in out.stdout, out.stderr
            calls = (run_claude if host == "claude" else run_codex)(isolated_home, repo, sim.base_url, key)
        assert calls == TOOLS
        # the host's last job_wait is bounded by its own tool timeout: on a loaded machine the merge
        # may still be running when the host's turn ends, so the test waits for the job itself
        waited = cli("job", "wait", "words", "--timeout", "300", "--repo", str(repo))
        assert waited.returncode == 0, waited.stdout + waited.stderr
        status = cli("job", "status", "words", "--json", cwd=repo)
        assert json.loads(status.stdout)["state"] == "accepted", status.stdout
        events = [json.loads(x) for x in (repo / ".ai/runtime/events.jsonl").read_text().splitlines()]
        answered = [e["data"] for e in events if e["type"] == "problem.answered"]
        assert [(a["kind"], a["reply"]) for a in answered] == [("review_rejected", "accept")]
        assert answered[0]["who"].endswith("@mcp")
    finally:
        cli("job", "stop", "--repo", str(repo))
