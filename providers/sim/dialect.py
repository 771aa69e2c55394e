"""Map a scenario's client-neutral actions onto the tools the client declared.

A scenario says `edit: {path, old, new}`; Claude Code declares `Edit(file_path, old_string,
new_string)`, OpenCode `edit(filePath, oldString, newString)`, the builtin runner
`edit(path, old, new)`. The sim reads the request's tool list and fills the matching
tool's arguments. Clients with their own conventions (Codex: `shell`/`exec_command`,
`apply_patch`) plug in through HOOKS: a hook returns a ToolCall, or None to pass.
Plugin modules listed in PLUGINS are imported on first use, so they register themselves
without this file naming their internals.

When no tool fits, Unmappable says which action and which tools; the sim then answers with
that explanation as plain text instead of crashing.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pilothouse.providers.sim.request import SimRequest, ToolCall, ToolDecl


class Unmappable(Exception):
    """An action the client's declared tools cannot express."""


@dataclass
class Action:
    kind: str  # read | write | edit | bash | glob | grep
    args: dict[str, Any]


@dataclass
class Context:
    """What a mapping may need besides the tools: the request, its working directory, the call id."""

    request: SimRequest
    cwd: str | None
    call_id: str


Hook = Callable[[Action, list[ToolDecl], Context], ToolCall | None]
HOOKS: list[Hook] = []
PLUGINS = ("pilothouse.providers.sim.dialect_codex", "pilothouse.providers.sim.dialect_mcp")
_plugins_loaded = False


def register(hook: Hook) -> Hook:
    """Add a mapping hook (tried before the generic mapping); usable as a decorator."""
    if hook not in HOOKS:
        HOOKS.append(hook)
    return hook


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name in PLUGINS:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                sys.stderr.write(f"pilothouse sim: dialect plugin {name} not loaded: {exc}\n")
        except Exception as exc:  # a broken plugin degrades to the generic mapping, never kills the sim
            sys.stderr.write(f"pilothouse sim: dialect plugin {name} not loaded: {type(exc).__name__}: {exc}\n")


# tool names per action (compared case-insensitively), best first
TOOL_NAMES: dict[str, tuple[str, ...]] = {
    "read": ("read", "read_file", "view"),
    "write": ("write", "write_file", "create_file"),
    "edit": ("edit", "edit_file", "str_replace"),
    "bash": ("bash", "shell", "exec_command", "run_command", "terminal"),
    "glob": ("glob", "find_files"),
    "grep": ("grep", "search", "grep_files"),
}
# abstract argument -> property names clients use for it
ARG_NAMES: dict[str, tuple[str, ...]] = {
    "path": ("path", "file_path", "filePath", "filepath", "file", "filename"),
    "content": ("content", "contents", "text", "file_text"),
    "old": ("old", "old_string", "oldString", "old_str"),
    "new": ("new", "new_string", "newString", "new_str"),
    "command": ("command", "cmd"),
    "pattern": ("pattern", "query", "regex"),
    "include": ("include", "glob"),
    "replace_all": ("replace_all", "replaceAll"),
}


def call_id(request: SimRequest, turn: int, index: int) -> str:
    """Stable per session and turn, distinct across turns (clients key results by it)."""
    digest = hashlib.sha1(f"{request.prompt}\0{turn}\0{index}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def map_actions(actions: list[dict[str, dict[str, Any]]], request: SimRequest, turn: int) -> list[ToolCall]:
    """ToolCalls for a turn's actions; raises Unmappable naming the first action that has no tool."""
    _load_plugins()
    cwd = request.cwd
    calls = []
    for i, raw in enumerate(actions):
        (kind, args), = raw.items()
        ctx = Context(request=request, cwd=cwd, call_id=call_id(request, turn, i))
        calls.append(map_action(Action(kind, dict(args)), request.tools, ctx))
    return calls


def map_action(action: Action, tools: list[ToolDecl], ctx: Context) -> ToolCall:
    for hook in HOOKS:
        call = hook(action, tools, ctx)
        if call is not None:
            return call
    tool = find_tool(tools, action.kind)
    if tool is not None:
        return ToolCall(ctx.call_id, tool.name, json.dumps(fill_arguments(action, tool, ctx)))
    shell = find_tool(tools, "bash")
    if shell is not None and action.kind != "bash":
        command = shell_equivalent(action)
        if command is not None:
            as_bash = Action("bash", {"command": command, "description": f"{action.kind} via shell"})
            return ToolCall(ctx.call_id, shell.name, json.dumps(fill_arguments(as_bash, shell, ctx)))
    declared = ", ".join(t.name for t in tools) or "none"
    raise Unmappable(f"sim: cannot map action '{action.kind}' onto the client's tools (declared: {declared})")


def find_tool(tools: list[ToolDecl], kind: str) -> ToolDecl | None:
    by_name = {t.name.lower(): t for t in tools if t.kind == "function"}
    for name in TOOL_NAMES.get(kind, (kind,)):
        if name in by_name:
            return by_name[name]
    return None


def fill_arguments(action: Action, tool: ToolDecl, ctx: Context) -> dict[str, Any]:
    """Arguments for `tool` from the action, keyed by the tool's own property names."""
    props = tool.properties
    out: dict[str, Any] = {}
    used: set[str] = set()
    for key, value in action.args.items():
        prop = _property_for(key, props)
        if prop is None:
            if key == "path" and action.kind in ("read", "write", "edit"):
                raise Unmappable(f"sim: tool '{tool.name}' has no path property "
                                 f"(properties: {', '.join(props) or 'none'})")
            continue  # optional extras the tool does not take (description, include…)
        used.add(prop)
        if key == "path" and _wants_absolute(props[prop], tool) and ctx.cwd and not os.path.isabs(str(value)):
            value = os.path.join(ctx.cwd, str(value))
        if key == "command" and props[prop].get("type") == "array":
            value = ["bash", "-lc", str(value)]
        out[prop] = value
    if "description" in props and "description" not in out:
        out["description"] = _describe(action)
    missing = [r for r in tool.required if r not in out]
    if missing:
        raise Unmappable(f"sim: cannot fill required argument(s) {', '.join(missing)} of tool '{tool.name}' "
                         f"for action '{action.kind}'")
    return out


def _property_for(key: str, props: dict[str, dict[str, Any]]) -> str | None:
    for name in ARG_NAMES.get(key, (key,)):
        if name in props:
            return name
    lowered = {p.lower(): p for p in props}
    return lowered.get(key.lower())


def _wants_absolute(schema: dict[str, Any], tool: ToolDecl) -> bool:
    text = f"{schema.get('description', '')} {tool.description}".lower()
    return "absolute" in text


def _describe(action: Action) -> str:
    target = action.args.get("path") or action.args.get("command") or action.args.get("pattern") or ""
    return f"{action.kind} {str(target)[:60]}".strip()


def shell_equivalent(action: Action) -> str | None:
    """A shell command doing the action, for clients that only declared a shell tool."""
    a = action.args
    q = shlex.quote
    if action.kind == "read":
        return f"cat {q(str(a['path']))}"
    if action.kind == "glob":
        return f"ls -1d {a['pattern']}"
    if action.kind == "grep":
        return f"grep -rn {q(str(a['pattern']))} {q(str(a.get('path', '.')))}"
    if action.kind == "write":
        script = ("import pathlib,sys; p=pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); "
                  "p.write_text(sys.argv[2])")
        return f"python3 -c {q(script)} {q(str(a['path']))} {q(str(a['content']))}"
    if action.kind == "edit":
        script = ("import pathlib,sys; p=pathlib.Path(sys.argv[1]); t=p.read_text(); "
                  "assert sys.argv[2] in t, 'old text not found'; p.write_text(t.replace(sys.argv[2], sys.argv[3], 1))")
        return f"python3 -c {q(script)} {q(str(a['path']))} {q(str(a['old']))} {q(str(a['new']))}"
    return None
