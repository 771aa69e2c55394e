"""Scenario loading/validation and the tool-dialect mapping (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.providers.contract import parse_result
from pilothouse.providers.errors import UserError
from pilothouse.providers.sim import dialect
from pilothouse.providers.sim.engine import respond
from pilothouse.providers.sim.request import Message, SimRequest, ToolCall, ToolDecl
from pilothouse.providers.sim.scenario import list_scenarios, load_scenario

BUNDLED = {"explore-basic", "code-basic", "auth-401", "quota-429", "garbage", "close-mid-stream", "slow"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return path


def test_bundled_scenarios_load_and_are_listed() -> None:
    listed = dict(list_scenarios())
    assert BUNDLED <= set(listed)
    for name in BUNDLED:
        scen = load_scenario(name)
        assert scen.name == name and scen.description and listed[name] == scen.description


def test_bundled_result_blocks_parse_per_mode() -> None:
    for name, mode in (("explore-basic", "explore"), ("code-basic", "code")):
        says = [t.say for t in load_scenario(name).scripts[0].turns if t.say and "<!--RESULT-->" in t.say]
        assert says
        for say in says:
            assert parse_result(say, mode).state == "parsed", say


@pytest.mark.parametrize("body, expected", [
    ("name: x\ndescription: d\nscripts:\n  - turns:\n      - say: hi\n      - say: a\n      - sya: oops\n",
     "x.yaml: scripts[0].turns[2]: unknown key 'sya' (expected say, actions, usage, error, fault, finish, delay_s)"),
    ("name: x\ndescription: d\nscripts:\n  - turns:\n      - actions:\n          - rea: {path: a}\n",
     "x.yaml: scripts[0].turns[0].actions[0]: unknown action 'rea' (expected read, write, edit, bash, glob, grep, mcp)"),
    ("name: x\ndescription: d\nscripts:\n  - turns:\n      - actions:\n          - edit: {path: a, old: b}\n",
     "scripts[0].turns[0].actions[0].edit: missing 'new'"),
    ("name: x\nscripts:\n  - turns:\n      - say: hi\n", "x.yaml: missing top-level key 'description' (add it)"),
    ("name: x\ndescription: d\nscripts:\n  - turns:\n      - fault: explode\n", "scripts[0].turns[0].fault:"),
    ("name: x\ndescription: d\nscripts:\n  - turns:\n      - {error: {status: 429}, say: hi}\n",
     "scripts[0].turns[0]: a turn with 'error' cannot also have say"),
    ("name: x\ndescription: d\nscripts:\n  - match: {mod: code}\n    turns: [{say: hi}]\n",
     "scripts[0].match: unknown key 'mod' (expected mode, contains)"),
    ("name: x\ndescription: d\nscripts: [\n", "x.yaml:4: invalid YAML"),
    ("- just a list\n", "expected a mapping"),
])
def test_bad_scenarios_name_file_field_and_fix(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(UserError) as info:
        load_scenario(write(tmp_path, body))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_name_lists_known(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown scenario 'nope' .*explore-basic"):
        load_scenario("nope")
    with pytest.raises(UserError, match="not found"):
        load_scenario(str(tmp_path / "missing.yaml"))


def test_user_scenarios_dir_is_searched(tmp_path: Path) -> None:
    from pilothouse.providers import paths

    folder = paths.config_dir() / "scenarios"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text("name: mine\ndescription: my own\nscripts:\n  - turns: [{say: hi}]\n")
    assert load_scenario("mine").description == "my own"
    assert ("mine", "my own") in list_scenarios()


def _request(tools: list[ToolDecl], system: str = "", mode: str = "code", history: int = 0) -> SimRequest:
    msgs = [Message("user", f"[pilothouse mode: {mode}]\n\ntask: t1")]
    for _ in range(history):
        msgs += [Message("assistant", "x", assistant_output=True), Message("tool", "ok")]
    return SimRequest(wire="chat", model="sim-1", stream=False, messages=msgs, tools=tools, system=system)


def _decl(name: str, props: dict[str, str], required: list[str] | None = None, desc: str = "") -> ToolDecl:
    return ToolDecl(name=name, properties={k: {"type": "string", "description": v} for k, v in props.items()},
                    required=list(props) if required is None else required)


CLAUDE = [
    _decl("Read", {"file_path": "The absolute path to the file to read"}),
    _decl("Write", {"file_path": "The absolute path to the file to write", "content": "c"}),
    _decl("Edit", {"file_path": "The absolute path to the file to modify", "old_string": "o", "new_string": "n"}),
    _decl("Bash", {"command": "c", "description": "d"}, required=["command"]),
]
OPENCODE = [
    _decl("read", {"filePath": "The path to the file to read"}),
    _decl("edit", {"filePath": "The absolute path to the file to modify", "oldString": "o", "newString": "n"}),
    _decl("bash", {"command": "c", "description": "Clear, concise description"}),
]


def test_claude_style_tools_get_absolute_paths_from_the_system_prompt() -> None:
    req = _request(CLAUDE, system="You are Claude Code.\n<env>\nWorking directory: /work/repo\n</env>")
    ctx = dialect.Context(req, req.cwd, "call_1")
    edit = dialect.map_action(dialect.Action("edit", {"path": "src/a.py", "old": "x", "new": "y"}), CLAUDE, ctx)
    assert edit.name == "Edit"
    assert json.loads(edit.arguments) == {"file_path": "/work/repo/src/a.py", "old_string": "x", "new_string": "y"}
    bash = dialect.map_action(dialect.Action("bash", {"command": "ls"}), CLAUDE, ctx)
    assert json.loads(bash.arguments) == {"command": "ls", "description": "bash ls"}


def test_opencode_style_camel_case_and_required_description() -> None:
    req = _request(OPENCODE, system="<env>\n  Working directory: /w/r\n</env>")
    ctx = dialect.Context(req, req.cwd, "c")
    read = json.loads(dialect.map_action(dialect.Action("read", {"path": "a.py"}), OPENCODE, ctx).arguments)
    assert read == {"filePath": "a.py"}  # its description does not ask for an absolute path
    edit = json.loads(dialect.map_action(dialect.Action("edit", {"path": "a.py", "old": "1", "new": "2"}),
                                         OPENCODE, ctx).arguments)
    assert edit == {"filePath": "/w/r/a.py", "oldString": "1", "newString": "2"}
    # no write tool: falls back to the shell with an equivalent command
    write = dialect.map_action(dialect.Action("write", {"path": "n.py", "content": "x"}), OPENCODE, ctx)
    args = json.loads(write.arguments)
    assert write.name == "bash" and "python3 -c" in args["command"] and args["description"]


def test_shell_with_array_command_and_codex_cwd() -> None:
    shell = ToolDecl("shell", properties={"command": {"type": "array"}, "workdir": {"type": "string"}},
                     required=["command"])
    req = _request([shell])
    req.messages.insert(0, Message("user", "<environment_context>\n  <cwd>/abs/repo</cwd>\n</environment_context>"))
    assert req.cwd == "/abs/repo" and req.mode == "code"
    call = dialect.map_action(dialect.Action("bash", {"command": "ls -la"}), [shell], dialect.Context(req, None, "c"))
    assert json.loads(call.arguments) == {"command": ["bash", "-lc", "ls -la"]}


def test_hooks_take_precedence_and_plugins_may_be_absent() -> None:
    def hook(action: dialect.Action, tools: list[ToolDecl], ctx: dialect.Context) -> ToolCall | None:
        if action.kind == "edit" and any(t.name == "apply_patch" for t in tools):
            return ToolCall(ctx.call_id, "apply_patch", "*** Begin Patch\n*** End Patch\n", kind="custom")
        return None

    tools = [ToolDecl("apply_patch", kind="custom")]
    dialect.register(hook)
    try:
        req = _request(tools)
        call = dialect.map_actions([{"edit": {"path": "a", "old": "b", "new": "c"}}], req, 0)[0]
        assert call.kind == "custom" and call.name == "apply_patch"
    finally:
        dialect.HOOKS.remove(hook)


def test_turn_index_counts_runs_of_model_output() -> None:
    scen = load_scenario("code-basic")
    tools = [_decl(n, {"path": ""}) for n in ("read",)] + CLAUDE
    assert respond(scen, _request(tools)).turn == 0
    req = _request(tools, history=2)
    # two tool calls of one turn listed as separate items are still one turn
    req.messages.insert(2, Message("assistant", "call 2", assistant_output=True))
    assert req.assistant_turns == 2 and respond(scen, req).turn == 2
    assert respond(scen, _request(tools, mode="resume")).script == 1


def test_until_reset_error_is_served_until_its_window_resets_then_skipped(tmp_path: Path) -> None:
    from pilothouse.providers.sim.resets import ResetBook

    scen = load_scenario(write(tmp_path, (
        "name: qw\ndescription: d\nscripts:\n  - match: {mode: code}\n    turns:\n"
        "      - error: {status: 429, retry_after_s: 120, window: five_hour, until_reset: true}\n"
        "      - say: back in business\n")))
    book = ResetBook(tmp_path / "state" / "resets.json")
    req = _request([])
    first = respond(scen, req, book, now=1000.0)
    assert first.error is not None and first.error.retry_after_s == 120
    again = respond(scen, req, book, now=1100.0)  # a retry before the reset: same window, less time left
    assert again.error is not None and again.error.retry_after_s == 20
    other_task = SimRequest(wire="chat", model="m", stream=False, tools=[],
                            messages=[Message("user", "[pilothouse mode: code]\n\ntask: t2")])
    other = respond(scen, other_task, book, now=1100.0)
    assert other.error is not None and other.error.retry_after_s == 120  # another task has its own window
    after = respond(scen, req, book, now=1121.0)
    assert after.error is None and after.reply.text == "back in business"
    # a new book on the same file (another dispatch process) sees the same reset
    assert respond(scen, req, ResetBook(tmp_path / "state" / "resets.json"), now=1121.0).error is None
    # without a book (or long after), the error is served again
    unbooked = respond(scen, req, None, now=1121.0).error
    assert unbooked is not None and unbooked.retry_after_s == 120
    later = respond(scen, req, book, now=1121.0 + 7200).error
    assert later is not None and later.retry_after_s == 120
