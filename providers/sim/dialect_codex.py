"""Codex's tool conventions for the sim: file changes go through `apply_patch`.

Codex 0.171 declares `apply_patch` as a *custom* (freeform) tool whose input is a patch in its
own envelope (`*** Begin Patch` … `*** End Patch`), and a shell as `exec_command {cmd}` (older
versions: `shell {command: [argv]}`), which the generic mapping already covers. So this hook
turns a scenario's `write` into an Add File hunk and its `edit` into an Update File hunk.

An Update hunk must quote whole lines, while a scenario's `old` may be part of a line; the sim
runs on the same machine, so it reads the file under the request's working directory to
widen `old`/`new` to the lines they sit in. When it cannot (no cwd, file missing, `old` not
found) it passes, and the generic mapping falls back to a shell command.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pilothouse.providers.sim.dialect import Action, Context, register
from pilothouse.providers.sim.request import ToolCall, ToolDecl

PATCH_TOOL = "apply_patch"


def _patch_tool(tools: list[ToolDecl]) -> ToolDecl | None:
    for t in tools:
        if t.name == PATCH_TOOL:
            return t
    return None


def add_file_patch(path: str, content: str) -> str:
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a trailing newline is implied by the hunk format
    body = "".join(f"+{ln}\n" for ln in lines) or "+\n"
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


def update_file_patch(path: str, text: str, old: str, new: str) -> str | None:
    """An Update File hunk replacing the first `old` in `text`, widened to whole lines."""
    at = text.find(old)
    if at < 0 or not old:
        return None
    start = text.rfind("\n", 0, at) + 1
    end_nl = text.find("\n", at + len(old))
    end = len(text) if end_nl < 0 else end_nl
    before = text[start:end]
    after = text[start:at] + new + text[at + len(old):end]
    if before.endswith("\n"):  # whole-file replacement: the last newline ends the last line
        before, after = before[:-1], after[:-1] if after.endswith("\n") else after
    minus = "".join(f"-{ln}\n" for ln in before.split("\n"))
    plus = "".join(f"+{ln}\n" for ln in after.split("\n"))
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n{minus}{plus}*** End Patch\n"


def _read(ctx: Context, path: str) -> str | None:
    """The file as the worker left it, read by the sim on the host: only inside the run's worktree
    (the cwd a request names is the worker's word), never through a link."""
    from pilothouse.providers.workerfs import read_in_tree

    root = ctx.request.root or ctx.cwd
    if not root or not (ctx.cwd or os.path.isabs(path)):
        return None
    full = os.path.normpath(os.path.join(ctx.cwd or root, path))
    rel = os.path.relpath(full, root)
    try:
        entry = read_in_tree(root, rel, 4 << 20)
        return entry.data.decode("utf-8") if entry.kind == "file" and not entry.truncated else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _call(tool: ToolDecl, patch: str, ctx: Context) -> ToolCall:
    if tool.kind == "custom":
        return ToolCall(ctx.call_id, tool.name, patch, kind="custom")
    # older Codex declared apply_patch as a function taking {input: <patch>}
    prop = next(iter(tool.properties), "input")
    return ToolCall(ctx.call_id, tool.name, json.dumps({prop: patch}))


@register
def codex_patch(action: Action, tools: list[ToolDecl], ctx: Context) -> ToolCall | None:
    if action.kind not in ("write", "edit"):
        return None
    tool = _patch_tool(tools)
    if tool is None:
        return None
    a: dict[str, Any] = action.args
    path = str(a.get("path") or "")
    if not path:
        return None
    text = _read(ctx, path)
    if action.kind == "write":
        content = str(a.get("content") or "")
        if text is None:
            return _call(tool, add_file_patch(path, content), ctx)
        # Add File refuses an existing file: replace its whole text instead
        patch = update_file_patch(path, text, text, content) if text.strip() else None
        return _call(tool, patch, ctx) if patch is not None else None
    if text is None:
        return None
    patch = update_file_patch(path, text, str(a.get("old") or ""), str(a.get("new") or ""))
    return _call(tool, patch, ctx) if patch is not None else None
