"""The sim's Responses (Codex) and Messages (Claude Code) wires, over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pilothouse.providers.sim.server import SimServer
from support import guard

PROMPT = "[pilothouse mode: code]\n\nAdd a slug helper.\n\ntask: t1"
CLAUDE_SYSTEM = [{"type": "text", "text": "You are Claude Code.\n<env>\nWorking directory: /tmp/work/repo\n</env>"}]
CLAUDE_TOOLS = [
    {"name": "Read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to read"}},
        "required": ["file_path"]}},
    {"name": "Write", "description": "Writes a file", "input_schema": {"type": "object", "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to write"},
        "content": {"type": "string"}}, "required": ["file_path", "content"]}},
    {"name": "Bash", "description": "Runs a command", "input_schema": {"type": "object", "properties": {
        "command": {"type": "string"}, "description": {"type": "string"}}, "required": ["command"]}},
]
CODEX_TOOLS = [
    {"type": "function", "name": "shell", "description": "Runs a shell command", "strict": False,
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                                     "workdir": {"type": "string"}}, "required": ["command"]}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": {"type": "grammar"}},
]

# the sim is on loopback: never route it through a proxy from the environment
HTTP = httpx.Client(trust_env=False, timeout=guard(10))


def events(resp: httpx.Response) -> list[tuple[str, dict]]:
    out, name = [], None
    for line in resp.text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name
            out.append((name, data))
    return out


@pytest.fixture
def sim(tmp_path: Path):
    with SimServer("code-basic", served_log=tmp_path / "served.jsonl") as server:
        yield server


def served(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "served.jsonl").read_text().splitlines()]


# --- Anthropic Messages ------------------------------------------------------------------------

def messages(url: str, msgs: list[dict], stream: bool = True, headers: dict | None = None) -> httpx.Response:
    body = {"model": "claude-sim", "max_tokens": 1000, "system": CLAUDE_SYSTEM, "tools": CLAUDE_TOOLS,
            "messages": msgs, "stream": stream}
    return HTTP.post(f"{url}/v1/messages?beta=true", json=body, headers=headers or {}, timeout=guard(10))


def test_messages_stream_text_tool_use_and_usage(sim: SimServer, tmp_path: Path) -> None:
    user = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                                        {"type": "text", "text": PROMPT}]}
    resp = messages(sim.base_url, [user])
    evs = events(resp)
    kinds = [k for k, _ in evs]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert evs[0][1]["message"]["usage"]["input_tokens"] >= 1
    text = "".join(d["delta"]["text"] for k, d in evs if k == "content_block_delta"
                   and d["delta"]["type"] == "text_delta")
    assert text == "I'll add a slugify helper in src/slug.py."
    starts = [d["content_block"] for k, d in evs if k == "content_block_start"]
    assert [s["type"] for s in starts] == ["text", "tool_use"] and starts[1]["name"] == "Write"
    assert starts[1]["id"].startswith("toolu_")
    partial = "".join(d["delta"]["partial_json"] for k, d in evs if k == "content_block_delta"
                      and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial)["file_path"] == "/tmp/work/repo/src/slug.py"
    assert kinds.count("content_block_stop") == 2
    delta = evs[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    rec = served(tmp_path)[-1]
    assert rec["wire"] == "messages" and rec["turn"] == 0
    assert delta["usage"]["output_tokens"] == rec["usage"]["output"]
    assert delta["usage"]["input_tokens"] == rec["usage"]["input"]

    # next turn: the assistant turn (possibly split in two messages) and the tool result
    tool_id = starts[1]["id"]
    history = [user, {"role": "assistant", "content": [{"type": "text", "text": text}]},
               {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Write", "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}]}]
    body = messages(sim.base_url, history, stream=False).json()
    assert body["type"] == "message" and body["stop_reason"] == "tool_use"
    assert body["content"][1]["name"] == "Read"
    assert body["content"][1]["input"] == {"file_path": "/tmp/work/repo/src/slug.py"}
    assert body["usage"]["output_tokens"] >= 1


def test_messages_errors_in_anthropic_shape() -> None:
    with SimServer("quota-429") as sim:
        resp = messages(sim.base_url, [{"role": "user", "content": "hi"}])
        assert resp.status_code == 429
        assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "rate_limit_error"
        assert resp.headers["anthropic-ratelimit-unified-5h-status"] == "rejected"
    with SimServer("explore-basic", api_key="k-123") as sim:
        resp = messages(sim.base_url, [{"role": "user", "content": "hi"}], headers={"x-api-key": "wrong"})
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
        ok = messages(sim.base_url, [{"role": "user", "content": "hi"}], headers={"x-api-key": "k-123"})
        assert ok.status_code == 200
        count = HTTP.post(f"{sim.base_url}/v1/messages/count_tokens", json={"messages": []},
                           headers={"x-api-key": "k-123"})
        assert count.json()["input_tokens"] >= 1


# --- OpenAI Responses --------------------------------------------------------------------------

def responses(url: str, items: list[dict], stream: bool = True) -> httpx.Response:
    body = {"model": "sim-1", "instructions": "You are Codex.", "input": items, "tools": CODEX_TOOLS,
            "stream": stream, "store": False}
    return HTTP.post(f"{url}/v1/responses", json=body, timeout=guard(10))


ENV = {"type": "message", "role": "user", "content": [
    {"type": "input_text", "text": "<environment_context>\n  <cwd>/tmp/w</cwd>\n</environment_context>"}]}
TASK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}


def test_responses_stream_events_and_usage(tmp_path: Path) -> None:
    scen = tmp_path / "s.yaml"
    scen.write_text("name: s\ndescription: d\nscripts:\n  - match: {mode: code}\n    turns:\n"
                    "      - say: running it\n        actions: [{bash: {command: 'ls -la'}}]\n"
                    "        usage: {input: 100, output: 20, reasoning: 5, cache_read: 40}\n"
                    "      - say: done\n")
    with SimServer(scen, served_log=tmp_path / "served.jsonl") as sim:
        evs = events(responses(sim.base_url, [ENV, TASK]))
        kinds = [k for k, _ in evs]
        assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
        assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
        for needed in ("response.output_item.added", "response.output_text.delta",
                       "response.function_call_arguments.delta", "response.output_item.done"):
            assert needed in kinds
        done = [d["item"] for k, d in evs if k == "response.output_item.done"]
        assert done[0]["type"] == "message" and done[0]["content"][0]["text"] == "running it"
        call = done[1]
        assert call["type"] == "function_call" and call["name"] == "shell"
        assert json.loads(call["arguments"]) == {"command": ["bash", "-lc", "ls -la"]}
        args = "".join(d["delta"] for k, d in evs if k == "response.function_call_arguments.delta")
        assert args == call["arguments"]
        usage = evs[-1][1]["response"]["usage"]
        assert usage == {"input_tokens": 140, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 25,
                         "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 165}
        assert served(tmp_path)[-1]["usage"] == {"input": 100, "output": 20, "reasoning": 5, "cache_read": 40,
                                                 "cache_write": 0}
        # history: message + function_call items of one turn, then the output -> turn 1
        history = [ENV, TASK, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "running it"}]}, {k: call[k] for k in ("type", "call_id", "name",
                                                                                  "arguments")},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "total 0"}]
        body = responses(sim.base_url, history, stream=False).json()
        assert body["status"] == "completed" and body["output"][0]["content"][0]["text"] == "done"
        assert served(tmp_path)[-1]["turn"] == 1


def test_responses_custom_tool_call_items_and_429_body(tmp_path: Path) -> None:
    from pilothouse.providers.sim import dialect
    from pilothouse.providers.sim.request import ToolCall

    def patch_hook(action, tools, ctx):
        if action.kind == "write" and any(t.kind == "custom" and t.name == "apply_patch" for t in tools):
            return ToolCall(ctx.call_id, "apply_patch", f"*** Begin Patch\n*** Add File: {action.args['path']}\n"
                            "+x\n*** End Patch\n", kind="custom")
        return None

    dialect.register(patch_hook)
    try:
        with SimServer("code-basic") as sim:
            evs = events(responses(sim.base_url, [TASK]))
    finally:
        dialect.HOOKS.remove(patch_hook)
    item = [d["item"] for k, d in evs if k == "response.output_item.done"][-1]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch"
    streamed = "".join(d["delta"] for k, d in evs if k == "response.custom_tool_call_input.delta")
    assert streamed == item["input"] and "Add File: src/slug.py" in streamed

    with SimServer("quota-429") as sim:
        resp = responses(sim.base_url, [TASK])
    err = resp.json()["error"]
    assert resp.status_code == 429 and err["type"] == "usage_limit_reached" and err["resets_in_seconds"] == 60
    assert resp.headers["x-codex-primary-used-percent"] == "100"
    assert resp.headers["x-codex-primary-window-minutes"] == "300"


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_faults_on_every_wire(path: str) -> None:
    body = {"model": "m", "input": "hi", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with SimServer("close-mid-stream") as sim:
        with pytest.raises(httpx.HTTPError):
            HTTP.post(sim.base_url + path, json=body)
    with SimServer("garbage") as sim:
        resp = HTTP.post(sim.base_url + path, json=body)
        assert resp.status_code == 200 and b"sim garbage" in resp.content
        assert b"message_stop" not in resp.content and b"response.completed" not in resp.content


def test_count_tokens_needs_the_key_too() -> None:
    with SimServer("explore-basic", api_key="k-1") as sim:
        url = f"{sim.base_url}/v1/messages/count_tokens"
        assert HTTP.post(url, json={"messages": []}).status_code == 401
        assert HTTP.post(url, json={"messages": []}, headers={"x-api-key": "k-1"}).status_code == 200


def test_a_request_naming_another_cwd_gets_no_host_file_into_its_patch(tmp_path: Path) -> None:
    """The sim reads on the host to build a Codex patch: only in the run's worktree, whatever <cwd>
    the worker's request claims."""
    outside, worktree = tmp_path / "outside", tmp_path / "wt"
    outside.mkdir()
    worktree.mkdir()
    (outside / "notes.txt").write_text("TOPSECRET line\n")
    scen = tmp_path / "s.yaml"
    scen.write_text("name: s\ndescription: d\nscripts:\n  - match: {mode: code}\n    turns:\n"
                    "      - actions: [{write: {path: notes.txt, content: 'mine'}}]\n")
    claim = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": f"<environment_context>\n  <cwd>{outside}</cwd>\n</environment_context>"}]}
    with SimServer(scen, root=worktree) as sim:
        evs = events(responses(sim.base_url, [claim, TASK]))
    [item] = [d["item"] for k, d in evs if k == "response.output_item.done" and d["item"]["type"] == "custom_tool_call"]
    assert "TOPSECRET" not in item["input"] and "*** Add File: notes.txt" in item["input"]
