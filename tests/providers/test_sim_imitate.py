"""The sim imitating a real server's gaps (`server:` switches, providers/sim/imitate.py), over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.providers.errors import UserError
from pilothouse.providers.sim.scenario import ServerSpec, load_scenario
from pilothouse.providers.sim.server import SimServer

from tests.providers.test_sim_chat import assemble, chat, prompt, sse

CODE = [{"role": "user", "content": prompt("code")}]


def served(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_usage_omit_streamed_sends_no_usage_in_a_stream_even_when_asked(tmp_path: Path) -> None:
    log = tmp_path / "served.jsonl"
    with SimServer("code-basic", served_log=log, server=ServerSpec(usage="omit_streamed")) as sim:
        chunks = sse(chat(sim.base_url, CODE, stream_options={"include_usage": True}))
        whole = chat(sim.base_url, CODE, stream=False).json()
    assert not any("usage" in c for c in chunks)
    assert assemble(chunks)[2] == "tool_calls"  # the answer itself is whole
    assert whole["usage"]["prompt_tokens"] >= 1  # a non-streamed answer still counts
    assert [r["usage_sent"] for r in served(log)] == [False, True]


def test_usage_omit_sends_no_usage_anywhere() -> None:
    with SimServer("code-basic", server=ServerSpec(usage="omit")) as sim:
        whole = chat(sim.base_url, CODE, stream=False).json()
        chunks = sse(chat(sim.base_url, CODE))
    assert "usage" not in whole and not any("usage" in c for c in chunks)


def test_tools_drop_answers_text_only_and_counts_the_prompt_without_tools(tmp_path: Path) -> None:
    log = tmp_path / "served.jsonl"
    with SimServer("code-basic", served_log=log, server=ServerSpec(tools="drop")) as sim:
        with_tools = chat(sim.base_url, CODE, stream=False).json()
        without = chat(sim.base_url, CODE, stream=False, tools=[]).json()
    msg = with_tools["choices"][0]["message"]
    assert "tool_calls" not in msg and msg["content"] == "I'll add a slugify helper in src/slug.py."
    assert with_tools["choices"][0]["finish_reason"] == "stop"
    assert with_tools["usage"]["prompt_tokens"] == without["usage"]["prompt_tokens"]
    assert [r["tools"] for r in served(log)] == [0, 0]


@pytest.mark.parametrize("choice, calls", [(None, []), ("auto", []), ("required", ["write"]),
                                           ({"type": "function", "function": {"name": "write"}}, ["write"])])
def test_tools_forced_only_calls_tools_only_when_tool_choice_forces_one(choice, calls) -> None:
    extra = {} if choice is None else {"tool_choice": choice}
    with SimServer("code-basic", server=ServerSpec(tools="forced_only")) as sim:
        _, got, _, _ = assemble(sse(chat(sim.base_url, CODE, **extra)))
    assert [c["name"] for c in got] == calls


def test_output_cap_cuts_the_answer_with_finish_reason_length() -> None:
    with SimServer("code-basic", server=ServerSpec(output_cap=3)) as sim:
        text, calls, finish, usage = assemble(sse(chat(sim.base_url, CODE, stream_options={"include_usage": True})))
    assert finish == "length" and calls == [] and text == "I'll add a s" and usage["completion_tokens"] == 3


@pytest.mark.parametrize("cap", ["request", 3000])
def test_the_requests_max_tokens_cuts_too(cap) -> None:
    with SimServer("code-basic", server=ServerSpec(output_cap=cap)) as sim:
        cut = chat(sim.base_url, CODE, stream=False, max_tokens=2).json()
        whole = chat(sim.base_url, CODE, stream=False, max_tokens=4000).json()
    assert cut["choices"][0]["finish_reason"] == "length" and cut["choices"][0]["message"]["content"] == "I'll add"
    assert whole["choices"][0]["finish_reason"] == "tool_calls"


def test_without_an_output_cap_the_scripted_answer_is_never_cut() -> None:
    with SimServer("code-basic") as sim:
        whole = chat(sim.base_url, CODE, stream=False, max_tokens=2).json()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"


def test_server_switches_come_from_the_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "llama.yaml"
    path.write_text("name: llama\ndescription: a llama.cpp-like server\n"
                    "server: {usage: omit_streamed, tools: forced_only, output_cap: 500}\n"
                    "scripts:\n  - turns:\n      - say: hi\n        actions: [{read: {path: a.txt}}]\n")
    scen = load_scenario(path)
    assert scen.server == ServerSpec(usage="omit_streamed", tools="forced_only", output_cap=500)
    with SimServer(scen) as sim:
        chunks = sse(chat(sim.base_url, CODE, stream_options={"include_usage": True}))
    assert assemble(chunks)[:2] == ("hi", []) and not any("usage" in c for c in chunks)


def test_a_bad_server_switch_is_one_line_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ndescription: x\nserver: {tools: never}\nscripts:\n  - turns:\n      - say: hi\n")
    with pytest.raises(UserError) as err:
        load_scenario(path)
    assert "server.tools" in str(err.value) and "\n" not in str(err.value)
