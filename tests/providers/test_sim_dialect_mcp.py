"""The sim calls a client's MCP tools (`mcp: {tool, arguments}`), over real HTTP: Claude Code's
`mcp__server__tool` names on the Messages wire, Codex's Responses namespaces, and `{{result.PATH}}`
arguments taken from the tool result the client sent back."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pilothouse.providers.sim.server import SimServer
from support import guard

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "mcp-host.yaml"
PROMPT = "Drive the job words to acceptance. [pilothouse mode: host]"
HTTP = httpx.Client(trust_env=False, timeout=guard(10))  # loopback: never through a proxy from the environment
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "request": {"type": "string"}},
          "required": ["name", "request"]}
CLAUDE_TOOLS = [{"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}] + [
    {"name": f"mcp__pilothouse__{n}", "input_schema": SCHEMA}
    for n in ("job_create", "job_start", "job_wait", "problem_act")]
CODEX_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
               {"type": "namespace", "name": "mcp__pilothouse", "description": "pilothouse", "tools": [
                   {"type": "function", "name": n, "parameters": SCHEMA}
                   for n in ("job_create", "job_start", "job_wait", "problem_act")]}]


@pytest.fixture
def sim():
    with SimServer(str(SCENARIO)) as server:
        yield server


def messages(url: str, msgs: list[dict]) -> dict:
    body = {"model": "sim-1", "max_tokens": 1000, "tools": CLAUDE_TOOLS, "messages": msgs, "stream": False}
    return HTTP.post(f"{url}/v1/messages", json=body).json()


def claude_history(results: list[str]) -> list[dict]:
    """The prompt, then one assistant tool call and its result per entry of `results`."""
    out: list[dict] = [{"role": "user", "content": PROMPT}]
    for n, text in enumerate(results):
        out += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": text}]}]
    return out


def test_claude_codes_mcp_tool_is_called_by_its_prefixed_name(sim: SimServer) -> None:
    body = messages(sim.base_url, claude_history([]))
    call = body["content"][-1]
    assert call["type"] == "tool_use" and call["name"] == "mcp__pilothouse__job_create"
    assert call["input"]["name"] == "words"


def test_a_result_template_takes_the_value_from_the_latest_tool_result(sim: SimServer) -> None:
    waited = json.dumps({"outcome": "waiting", "problems": [{"code": "KMNPRT", "replies": ["accept"]}]})
    body = messages(sim.base_url, claude_history(['{"job": "words"}', '{"pid": 7}', waited]))
    call = body["content"][-1]
    assert call["name"] == "mcp__pilothouse__problem_act"
    assert call["input"] == {"code": "KMNPRT", "reply": "accept"}
    # Codex wraps a result ({"content": [{"type": "text", "text": "<json>"}]}): found inside as well
    wrapped = json.dumps({"content": [{"type": "text", "text": waited}], "isError": False})
    body = messages(sim.base_url, claude_history(['{"job": "words"}', '{"pid": 7}', wrapped]))
    assert body["content"][-1]["input"]["code"] == "KMNPRT"


def test_a_template_with_nothing_to_take_is_said_not_crashed(sim: SimServer) -> None:
    body = messages(sim.base_url, claude_history(['{"job": "words"}', '{"pid": 7}', "not json"]))
    assert [b["type"] for b in body["content"]] == ["text"]
    assert "no tool result so far has problems.0.code" in body["content"][0]["text"]


def test_codex_namespaced_mcp_tool_is_called_with_its_namespace(sim: SimServer) -> None:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}]
    body = HTTP.post(f"{sim.base_url}/v1/responses", json={"model": "sim-1", "input": items, "tools": CODEX_TOOLS,
                                                           "stream": False}).json()
    [call] = [o for o in body["output"] if o["type"] == "function_call"]
    assert (call["namespace"], call["name"]) == ("mcp__pilothouse", "job_create")
    assert json.loads(call["arguments"])["name"] == "words"


def test_an_undeclared_mcp_tool_is_explained(sim: SimServer) -> None:
    body = HTTP.post(f"{sim.base_url}/v1/messages", json={
        "model": "sim-1", "max_tokens": 100, "tools": CLAUDE_TOOLS[:1], "stream": False,
        "messages": [{"role": "user", "content": PROMPT}]}).json()
    assert "declared no MCP tool 'job_create' (declared: Read)" in body["content"][-1]["text"]


def test_opencodes_mcp_tool_is_called_by_its_server_prefixed_name(sim: SimServer) -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}}
             for n in ("bash", "list_mcp_resources", "pilothouse_job_create", "pilothouse_job_start")]
    body = HTTP.post(f"{sim.base_url}/v1/chat/completions", json={
        "model": "sim-1", "messages": [{"role": "user", "content": PROMPT}], "tools": tools}).json()
    [call] = body["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "pilothouse_job_create"
    assert json.loads(call["function"]["arguments"])["name"] == "words"
