"""The builtin worker's tools and event parsing (the end-to-end loop runs in tests/core/test_dispatch.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pilothouse.providers.runners import get_runner
from pilothouse.providers.runners.builtin_tools import MODE_TOOLS, Tools, tool_schemas
from support import one_shot_http


def tools(tmp_path: Path, mode: str = "code") -> Tools:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True, exist_ok=True)
    (work / "src" / "a.py").write_text("def f():\n    return 1\n")
    return Tools(work, mode, env={"PATH": "/usr/bin:/bin"}, deadline=lambda: 30.0)


def test_paths_outside_the_workdir_are_denied(tmp_path):
    t = tools(tmp_path)
    (tmp_path / "secret.txt").write_text("s")
    (t.root / "link").symlink_to(tmp_path / "secret.txt")
    for name, args in [("read", {"path": "../secret.txt"}), ("read", {"path": str(tmp_path / "secret.txt")}),
                       ("read", {"path": "link"}), ("write", {"path": "../x.txt", "content": "x"}),
                       ("edit", {"path": "/etc/hostname", "old": "a", "new": "b"}),
                       ("grep", {"pattern": "s", "path": ".."}), ("glob", {"pattern": "../*"})]:
        status, out = t.run(name, args)
        assert status == "denied", (name, args, out)
    assert not (tmp_path / "x.txt").exists()


def test_tools_work_inside(tmp_path):
    t = tools(tmp_path)
    assert t.run("read", {"path": "src/a.py"}) == ("ok", "def f():\n    return 1\n")
    assert t.run("write", {"path": "src/b.py", "content": "X = 1\n"})[0] == "ok"
    assert t.run("edit", {"path": "src/b.py", "old": "X = 1", "new": "X = 2"})[0] == "ok"
    assert (t.root / "src/b.py").read_text() == "X = 2\n"
    assert t.run("edit", {"path": "src/b.py", "old": "nothere", "new": ""})[0] == "error"
    assert t.run("glob", {"pattern": "src/*.py"}) == ("ok", "src/a.py\nsrc/b.py")
    assert "src/a.py:1: def f():" in t.run("grep", {"pattern": "def ", "path": "src"})[1]
    status, out = t.run("bash", {"command": "echo hi && exit 3"})
    assert status == "ok" and out.startswith("exit code 3\nhi")


@pytest.mark.parametrize("mode", ["explore", "review", "plan"])
def test_read_only_modes_cannot_write_or_run(tmp_path, mode):
    t = tools(tmp_path, mode)
    assert {s["function"]["name"] for s in tool_schemas(mode)} == {"read", "glob", "grep"}
    for name, args in [("write", {"path": "n.txt", "content": "x"}), ("bash", {"command": "touch n.txt"}),
                       ("edit", {"path": "src/a.py", "old": "1", "new": "2"})]:
        assert t.run(name, args)[0] == "denied"
    assert not (t.root / "n.txt").exists()


def test_test_mode_runs_commands_but_has_no_write_tools():
    assert set(MODE_TOOLS["test"]) == {"read", "glob", "grep", "bash"}
    assert set(MODE_TOOLS["code"]) == set(MODE_TOOLS["resume"]) == {"read", "write", "edit", "bash", "glob", "grep"}


def test_parse_line_normalises_and_ignores_noise():
    r = get_runner("builtin")
    assert r.parse_line('{"kind":"text","text":"hi"}')[0].text == "hi"
    u = r.parse_line('{"kind":"usage","input":3,"output":2,"reasoning":1,"cache_read":0,"cache_write":0,"cost":0}')[0]
    assert (u.input, u.output, u.reasoning) == (3, 2, 1)
    assert r.parse_line('{"kind":"progress"}') == [] and r.parse_line("garbage{") == []
    e = r.parse_line(json.dumps({"kind": "error", "message": "x", "error_class": "auth"}))[0]
    assert e.error_class == "auth"


def test_worker_config_never_carries_the_key(tmp_path):
    from pilothouse.providers.provider_index import record
    from pilothouse.providers.runners.base import RunSpec
    from pilothouse.providers.sandbox import link_credential, make_sandbox

    sb = make_sandbox("sim", "cfg-1")
    key_file = tmp_path / "k"
    key_file.write_text("sk-secret-value-123456\n")
    link_credential(sb, key_file, "sk-secret-value-123456")
    spec = RunSpec(run_id="cfg-1", provider=record("sim"), mode="explore", model="sim-1",
                   base_url="http://127.0.0.1:1/v1", workdir=tmp_path, sandbox=sb, task_text="t",
                   task_file=tmp_path / "t.md", step_cap=3, timeout_s=10, idle_timeout_s=5)
    launch = get_runner("builtin").build(spec)
    blob = json.dumps(launch.argv) + json.dumps(launch.env) + (launch.stdin or b"").decode()
    assert "sk-secret-value" not in blob
    assert json.loads(launch.stdin or b"{}")["key_file"] == str(sb.root / "credential")
    assert (sb.root / "credential").is_symlink()
    assert set(launch.env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HOME", "XDG_CONFIG_HOME",
                               "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "PYTHONDONTWRITEBYTECODE"}


def test_run_lock_refuses_a_second_live_holder(tmp_path):
    import subprocess
    import sys

    from pilothouse.providers.errors import UserError
    from pilothouse.providers.sandbox import LOCK, acquire_lock, lock_holder

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.05)
        start = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        (tmp_path / LOCK).write_text(f"{p.pid} {start}\n")
        assert lock_holder(tmp_path) == p.pid
        with pytest.raises(UserError):
            acquire_lock(tmp_path)
        (tmp_path / LOCK).write_text(f"{p.pid} 1\n")  # same pid, other start time: a recycled pid
        assert lock_holder(tmp_path) is None
        acquire_lock(tmp_path)
    finally:
        p.kill()


def test_client_reads_plain_json_and_close_delimited_sse():
    from pilothouse.providers.runners.builtin_http import ChatClient

    body = json.dumps({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).encode()
    url = one_shot_http(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\n\r\n" + body)
    out = ChatClient(url, None, 5).complete({"model": "m", "messages": []})
    assert out["text"] == "hi" and out["usage"]["prompt_tokens"] == 5
    sse = (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
           b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"read","arguments":"{\\"pa"}}]}}]}\n\n'
           b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\\": \\"x\\"}"}}]},"finish_reason":"tool_calls"}]}\n\n'
           b"data: [DONE]\n\n")
    url = one_shot_http(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + sse)
    out = ChatClient(url, "k", 5).complete({"model": "m", "messages": []})
    assert out["text"] == "a" and out["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path": "x"}'}


def test_client_maps_http_errors():
    from pilothouse.providers.runners.builtin_http import ChatClient, ChatError

    for status, cls in ((401, "auth"), (429, "quota"), (503, "transient"), (400, "fatal")):
        url = one_shot_http(f"HTTP/1.1 {status} X\r\nretry-after: 30\r\nContent-Length: 2\r\n\r\n{{}}".encode())
        with pytest.raises(ChatError) as exc:
            ChatClient(url, None, 5).complete({})
        assert exc.value.error_class == cls
        if cls == "quota":
            assert exc.value.quota and exc.value.quota["resets_at"]
    url = one_shot_http(b"\x00\x01 not http at all\r\n\r\n")
    with pytest.raises(ChatError) as exc:
        ChatClient(url, None, 5).complete({})
    assert exc.value.error_class == "fatal"


def _answer(**extra) -> dict:
    return {"text": "Hello there, this is the answer.", "reasoning": "", "tool_calls": [], "usage": {},
            "timings": {}, "finish_reason": "stop", **extra}


PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}], "tools": []}


def test_usage_the_server_reports_is_measured_with_cache_and_reasoning_split_out():
    from pilothouse.providers.runners.builtin_worker import _usage

    ev = _usage(_answer(usage={"prompt_tokens": 50, "completion_tokens": 9,
                               "prompt_tokens_details": {"cached_tokens": 20},
                               "completion_tokens_details": {"reasoning_tokens": 4}}), PAYLOAD)
    assert (ev["input"], ev["cache_read"], ev["output"], ev["reasoning"], ev["source"]) == (30, 20, 5, 4, "measured")


def test_llama_cpp_timings_count_as_measured_usage_when_usage_is_missing():
    from pilothouse.providers.runners.builtin_worker import _usage

    ev = _usage(_answer(timings={"prompt_n": 120, "cache_n": 30, "predicted_n": 17}), PAYLOAD)
    assert (ev["input"], ev["cache_read"], ev["output"], ev["source"]) == (120, 30, 17, "measured")


def test_without_any_count_the_turn_is_estimated_from_the_text_never_zero():
    from pilothouse.providers.runners.builtin_worker import _usage

    ev = _usage(_answer(usage={"prompt_tokens": 0, "completion_tokens": 0}), PAYLOAD)
    sent = len(json.dumps(PAYLOAD["messages"])) + len(json.dumps([]))
    assert ev["source"] == "estimated" and ev["input"] == -(-sent // 4) and ev["output"] == 8
    parsed = get_runner("builtin").parse_line(json.dumps(ev))
    assert [(p.kind, p.source, p.input) for p in parsed] == [("usage", "estimated", ev["input"])]
