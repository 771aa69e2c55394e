"""The sim's OpenAI chat-completions wire, over real HTTP against a real SimServer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from pilothouse.providers.sim.server import SimServer, load_scenario
from support import guard

BUILTIN_TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} a file", "parameters": {
        "type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": list(keys)}}}
    for n, keys in (("read", ("path",)), ("write", ("path", "content")), ("edit", ("path", "old", "new")),
                    ("bash", ("command",)), ("glob", ("pattern",)), ("grep", ("pattern",)))
]

# the sim is on loopback: never route it through a proxy from the environment
HTTP = httpx.Client(trust_env=False, timeout=guard(10))


def prompt(mode: str, text: str = "do the task") -> str:
    return f"[pilothouse mode: {mode}]\n\nYou are a worker.\n\n{text}"


def sse(resp: httpx.Response) -> list[dict]:
    out = []
    for line in resp.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def chat(url: str, messages: list[dict], stream: bool = True, tools: list | None = None, **extra) -> httpx.Response:
    body = {"model": "sim-1", "messages": messages, "tools": BUILTIN_TOOLS if tools is None else tools,
            "stream": stream, **extra}
    return HTTP.post(f"{url}/v1/chat/completions", json=body, timeout=guard(10))


def assemble(chunks: list[dict]) -> tuple[str, list[dict], str | None, dict | None]:
    text, calls, finish, usage = "", {}, None, None
    for c in chunks:
        usage = c.get("usage") or usage
        for choice in c["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return text, [calls[i] for i in sorted(calls)], finish, usage


@pytest.fixture
def code_sim(tmp_path: Path):
    with SimServer(load_scenario("code-basic"), served_log=tmp_path / "served.jsonl") as sim:
        yield sim


def test_streams_text_and_tool_calls_with_usage(code_sim: SimServer) -> None:
    resp = chat(code_sim.base_url, [{"role": "user", "content": prompt("code")}],
                stream_options={"include_usage": True})
    assert resp.status_code == 200 and resp.headers["content-type"] == "text/event-stream"
    assert resp.text.rstrip().endswith("data: [DONE]")
    chunks = sse(resp)
    text, calls, finish, usage = assemble(chunks)
    assert text == "I'll add a slugify helper in src/slug.py."
    assert finish == "tool_calls"
    assert [c["name"] for c in calls] == ["write"]
    args = json.loads(calls[0]["arguments"])
    assert args == {"path": "src/slug.py", "content": 'def slugify(text):\n    return text.replace(" ", "-")\n'}
    assert sum(1 for c in chunks if any(tc for ch in c["choices"] for tc in ch["delta"].get("tool_calls") or [])) > 2
    assert chunks[-1]["choices"] == [] and usage["prompt_tokens"] >= 1 and usage["completion_tokens"] >= 1


def test_usage_in_last_chunk_without_include_usage_and_served_log(code_sim: SimServer, tmp_path: Path) -> None:
    chunks = sse(chat(code_sim.base_url, [{"role": "user", "content": prompt("code")}]))
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    usage = chunks[-1]["usage"]
    served = [json.loads(line) for line in (tmp_path / "served.jsonl").read_text().splitlines()]
    assert len(served) == 1
    rec = served[0]
    assert rec["wire"] == "chat" and rec["scenario"] == "code-basic" and rec["script"] == 0 and rec["turn"] == 0
    assert rec["status"] == 200 and rec["ts"].endswith("Z")
    assert rec["usage"]["input"] == usage["prompt_tokens"] and rec["usage"]["output"] == usage["completion_tokens"]


def test_turn_follows_the_assistant_messages_in_history(code_sim: SimServer) -> None:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": prompt("code")}]
    names = []
    for _ in range(5):
        resp = chat(code_sim.base_url, history, stream=False)
        msg = resp.json()["choices"][0]["message"]
        names.append([c["function"]["name"] for c in msg.get("tool_calls") or []])
        history.append({"role": "assistant", "content": msg["content"], "tool_calls": msg.get("tool_calls")})
        for c in msg.get("tool_calls") or []:
            history.append({"role": "tool", "tool_call_id": c["id"], "content": "ok"})
    assert names == [["write"], ["read"], ["edit"], ["bash"], []]
    assert "<!--RESULT-->" in msg["content"] and resp.json()["choices"][0]["finish_reason"] == "stop"
    # a resume: a new user message in the same session continues with the next turns
    history.append({"role": "user", "content": "Review findings: add type hints."})
    msg = chat(code_sim.base_url, history, stream=False).json()["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"]["name"] == "read"
    # past the last turn
    long = history + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}] * 5
    assert chat(code_sim.base_url, long, stream=False).json()["choices"][0]["message"]["content"] == \
        "sim: script finished"


def test_no_matching_script_says_so() -> None:
    with SimServer("code-basic") as sim:
        text = chat(sim.base_url, [{"role": "user", "content": prompt("review")}], stream=False).json()
    assert text["choices"][0]["message"]["content"] == "sim: no script matched this request (scenario code-basic)"


def test_unmappable_action_answers_text_not_crash(code_sim: SimServer) -> None:
    resp = chat(code_sim.base_url, [{"role": "user", "content": prompt("code")}], stream=False,
                tools=BUILTIN_TOOLS[:1])  # only `read`: no write, no shell to fall back on
    msg = resp.json()["choices"][0]["message"]
    assert resp.status_code == 200 and "tool_calls" not in msg
    assert "cannot map action 'write'" in msg["content"] and "declared: read" in msg["content"]


def test_api_key_bearer_or_x_api_key() -> None:
    with SimServer("explore-basic", api_key="sk-sim-canary") as sim:
        url = f"{sim.base_url}/v1/chat/completions"
        body = {"model": "sim-1", "messages": [{"role": "user", "content": prompt("explore")}]}
        bad = HTTP.post(url, json=body, headers={"authorization": "Bearer nope"})
        assert bad.status_code == 401
        assert bad.json()["error"]["code"] == "invalid_api_key" and bad.headers["x-should-retry"] == "false"
        assert "sk-sim-canary" not in bad.text
        assert HTTP.post(url, json=body).status_code == 401
        assert HTTP.post(url, json=body, headers={"authorization": "Bearer sk-sim-canary"}).status_code == 200
        assert HTTP.post(url, json=body, headers={"x-api-key": "sk-sim-canary"}).status_code == 200


def test_scripted_401_and_429_headers(tmp_path: Path) -> None:
    with SimServer("auth-401") as sim:
        resp = chat(sim.base_url, [{"role": "user", "content": "hi"}])
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "invalid_request_error"
    with SimServer("quota-429", served_log=tmp_path / "s.jsonl") as sim:
        before = time.time()
        resp = chat(sim.base_url, [{"role": "user", "content": "hi"}])
    assert resp.status_code == 429
    h = resp.headers
    assert h["retry-after"] == "60" and h["x-ratelimit-reset-requests"] == "60s"
    assert h["x-ratelimit-reset-tokens"] == "60s"
    assert h["x-pilothouse-window"] == "five_hour" and h["x-pilothouse-used-pct"] == "100"
    assert h["anthropic-ratelimit-unified-status"] == "rejected"
    assert h["anthropic-ratelimit-unified-representative-claim"] == "five_hour"
    assert abs(int(h["anthropic-ratelimit-unified-reset"]) - (before + 60)) < 5
    assert h["anthropic-ratelimit-unified-5h-utilization"] == "1"
    assert h["anthropic-ratelimit-requests-reset"].endswith("Z")
    assert resp.json()["error"]["code"] == "usage_limit_reached"
    rec = json.loads((tmp_path / "s.jsonl").read_text())
    assert rec["status"] == 429 and rec["usage"]["input"] == 0


def test_faults_close_mid_stream_and_garbage() -> None:
    with SimServer("close-mid-stream") as sim:
        with pytest.raises(httpx.HTTPError):
            chat(sim.base_url, [{"role": "user", "content": "hi"}])
        with pytest.raises(httpx.HTTPError):
            chat(sim.base_url, [{"role": "user", "content": "hi"}], stream=False)
    with SimServer("garbage") as sim:
        resp = chat(sim.base_url, [{"role": "user", "content": "hi"}])
        assert resp.status_code == 200 and b"[DONE]" not in resp.content
        with pytest.raises(json.JSONDecodeError):
            sse(resp)
        resp = chat(sim.base_url, [{"role": "user", "content": "hi"}], stream=False)
        with pytest.raises(json.JSONDecodeError):
            resp.json()


def test_delay_and_stop_do_not_hang(tmp_path: Path) -> None:
    scen = tmp_path / "delayed.yaml"
    scen.write_text("name: delayed\ndescription: d\nscripts:\n  - turns:\n      - {say: late, delay_s: 0.3}\n")
    with SimServer(scen) as sim:
        started = time.monotonic()
        resp = chat(sim.base_url, [{"role": "user", "content": "hi"}], stream=False)
        assert resp.json()["choices"][0]["message"]["content"] == "late"
        assert time.monotonic() - started >= 0.3
    with SimServer("slow") as sim:  # a request waiting out its delay must not hold stop() up
        with pytest.raises(httpx.ReadTimeout):
            HTTP.post(f"{sim.base_url}/v1/chat/completions", timeout=0.2,
                       json={"messages": [{"role": "user", "content": "hi"}]})
    assert sim.stopping.is_set()


def test_models_endpoint_says_simulator() -> None:
    with SimServer("explore-basic") as sim:
        for path in ("/v1/models", "/models"):
            body = HTTP.get(sim.base_url + path).json()
            assert body["data"][0]["id"] == "sim-1" and "simulator" in body["note"]
        assert HTTP.get(sim.base_url + "/nope").status_code == 404


def test_until_reset_429_over_http_then_the_script_continues(tmp_path: Path) -> None:
    scen = tmp_path / "qw.yaml"
    scen.write_text("name: qw\ndescription: d\nscripts:\n  - turns:\n"
                    "      - error: {status: 429, retry_after_s: 600, window: five_hour, until_reset: true}\n"
                    "      - say: after the wait\n")
    resets = tmp_path / "resets.json"
    msgs = [{"role": "user", "content": prompt("code")}]
    with SimServer(scen, resets_file=resets) as sim:
        first = chat(sim.base_url, msgs, stream=False)
        assert first.status_code == 429 and 595 <= int(first.headers["retry-after"]) <= 600
        book = json.loads(resets.read_text())
        resets.write_text(json.dumps({k: time.time() - 1 for k in book}))  # the window has reset
    with SimServer(scen, resets_file=resets) as sim:  # a new dispatch's sim reads the same book
        after = chat(sim.base_url, msgs, stream=False)
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] == "after the wait"
