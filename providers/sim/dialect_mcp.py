"""MCP tools for the sim: a scenario's `mcp: {tool, arguments}` calls a tool of an MCP server the
client declared, so a real host CLI can be scripted to drive an MCP server.

Clients name an MCP server's tools their own way: Claude Code `mcp__pilothouse__job_create`; OpenCode
`pilothouse_job_create`; Codex declares `job_create` inside a Responses namespace `mcp__pilothouse`
and expects the call to name that namespace. The hook takes the declared tool named `tool`, else the one whose name ends in a
separator and `tool`. A string argument written `{{result.PATH}}`
becomes the value at PATH (dotted keys, list indexes) in the newest tool result the client sent
back that has one — how a script answers a problem whose code only the server knew.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pilothouse.providers.sim.dialect import Action, Context, Unmappable, register
from pilothouse.providers.sim.request import ToolCall, ToolDecl

_TEMPLATE = re.compile(r"^\{\{\s*result\.([A-Za-z0-9_.-]+)\s*\}\}$")
_MISSING = object()


def find_mcp_tool(tools: list[ToolDecl], name: str) -> ToolDecl | None:
    callable_ = [t for t in tools if t.kind in ("function", "namespaced")]
    exact = [t for t in callable_ if t.name == name]
    if exact:
        return exact[0]
    suffixed = [t for t in callable_ if re.search(rf"[_.:/-]{re.escape(name)}$", t.name)]
    return suffixed[0] if suffixed else None


def _json_values(text: str) -> list[Any]:
    """Every JSON value a tool result's text holds: itself, or objects embedded in it."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out, decoder, pos = [], json.JSONDecoder(), 0
    while (start := text.find("{", pos)) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        out.append(value)
        pos = end
    return out


def _walk(value: Any, path: list[str]) -> Any:
    for key in path:
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return _MISSING
    return value


def _lookup(value: Any, path: list[str]) -> Any:
    """PATH in the value, or in what it wraps (structured content, JSON inside text parts)."""
    found = _walk(value, path)
    if found is not _MISSING:
        return found
    if isinstance(value, dict):
        for key in ("structuredContent", "structured_content", "content", "text", "result"):
            if key in value:
                inner = value[key]
                for candidate in _json_values(inner) if isinstance(inner, str) else [inner]:
                    found = _lookup(candidate, path)
                    if found is not _MISSING:
                        return found
    if isinstance(value, list):
        for item in value:
            found = _lookup(item, path)
            if found is not _MISSING:
                return found
    return _MISSING


def resolve(value: Any, ctx: Context) -> Any:
    if isinstance(value, dict):
        return {k: resolve(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, ctx) for v in value]
    m = _TEMPLATE.match(value) if isinstance(value, str) else None
    if m is None:
        return value
    path = m.group(1).split(".")
    for msg in reversed(ctx.request.messages):
        if msg.role != "tool":
            continue
        for candidate in _json_values(msg.text):
            found = _lookup(candidate, path)
            if found is not _MISSING:
                return found
    raise Unmappable(f"sim: no tool result so far has {m.group(1)} (for {value})")


@register
def mcp_call(action: Action, tools: list[ToolDecl], ctx: Context) -> ToolCall | None:
    if action.kind != "mcp":
        return None
    name = str(action.args.get("tool") or "")
    tool = find_mcp_tool(tools, name)
    if tool is None:
        declared = ", ".join(t.name for t in tools) or "none"
        raise Unmappable(f"sim: the client declared no MCP tool '{name}' (declared: {declared})")
    arguments = resolve(dict(action.args.get("arguments") or {}), ctx)
    return ToolCall(ctx.call_id, tool.name, json.dumps(arguments), namespace=tool.namespace)
