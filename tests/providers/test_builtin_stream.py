"""The builtin worker's stream reader against the tool-call streams each server really sends
(tests/providers/recorded/streams: the shape each server documents or was seen to send)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.providers.runners.builtin_http import ChatClient
from pilothouse.providers.runners.builtin_stream import ToolCalls
from support import one_shot_http

STREAMS = Path(__file__).parent / "recorded" / "streams"
EXPECTED = json.loads((STREAMS / "expected.json").read_text())


@pytest.mark.parametrize("server", sorted(EXPECTED))
def test_tool_calls_are_assembled_as_each_server_streams_them(server):
    body = (STREAMS / f"{server}.sse").read_bytes()
    url = one_shot_http(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + body)
    out = ChatClient(url, None, 10).complete({"model": "m", "messages": []})
    got = [[c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])] for c in out["tool_calls"]]
    assert got == EXPECTED[server]
    assert out["finish_reason"] == "tool_calls"


def test_a_name_repeated_in_every_delta_is_the_name_once():
    calls = ToolCalls()
    for piece in ('{"pa', 'th": ', '"a"}'):
        calls.add({"index": 0, "id": "c", "function": {"name": "read", "arguments": piece}})
    assert calls.calls()[0]["function"] == {"name": "read", "arguments": '{"path": "a"}'}


def test_a_name_sent_in_pieces_is_joined():
    calls = ToolCalls()
    calls.add({"index": 0, "id": "c", "function": {"name": "re"}})
    calls.add({"index": 0, "function": {"name": "ad", "arguments": "{}"}})
    assert calls.calls()[0]["function"]["name"] == "read"


def test_deltas_without_an_index_follow_their_id_or_the_last_call():
    calls = ToolCalls()
    calls.add({"id": "a", "function": {"name": "read", "arguments": '{"path":'}})
    calls.add({"function": {"arguments": ' "x"}'}})  # no index, no id: the call before
    calls.add({"id": "b", "function": {"name": "glob", "arguments": "{}"}})
    calls.add({"id": "a", "function": {"arguments": ""}})
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls.calls()] == [
        ("a", "read", '{"path": "x"}'), ("b", "glob", "{}")]


def test_junk_deltas_are_ignored_not_raised():
    calls = ToolCalls()
    for junk in (None, "x", 3, {"index": "zero"}, {"index": -1, "function": "read"}, {"index": True}):
        calls.add(junk)
    assert all(c["function"] == {"name": "", "arguments": ""} for c in calls.calls())
