"""OpenAI Responses (`POST /v1/responses`): what Codex speaks.

Streams the semantic events (response.created, output_item.added/done, output_text.delta,
function_call_arguments.delta, custom_tool_call_input.delta, response.completed) with a
sequence_number on each. Codex collects items from `response.output_item.done` and the usage
from `response.completed`, and treats a stream that ends without it as an error.

Usage: input_tokens = input + cache_read + cache_write (input_tokens_details.cached_tokens =
cache_read); output_tokens = output + reasoning (output_tokens_details.reasoning_tokens).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pilothouse.providers.sim import limits
from pilothouse.providers.sim.request import (
    Message,
    Reply,
    SimRequest,
    ToolCall,
    ToolDecl,
    Usage,
    content_text,
    pieces,
)
from pilothouse.providers.sim.scenario import ErrorCue

NAME = "responses"
# input items the model produced (one model turn may list several of them back to back)
MODEL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call",
               "tool_search_call", "image_generation_call"}
TOOL_OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output",
                "tool_search_output"}


def parse(body: dict[str, Any]) -> SimRequest:
    system = [str(body.get("instructions") or "")]
    messages: list[Message] = []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or "message"
        if kind == "message":
            role = str(item.get("role") or "user")
            text = content_text(item.get("content"))
            if role in ("system", "developer"):
                system.append(text)
                messages.append(Message("system", text))
            else:
                messages.append(Message(role, text, assistant_output=role == "assistant"))
        elif kind in MODEL_ITEMS:
            messages.append(Message("assistant", content_text(item), assistant_output=True))
        elif kind in TOOL_OUTPUTS:
            messages.append(Message("tool", content_text(item.get("output"))))
    tools = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        tools.append(_tool(t))
        if t.get("type") == "namespace":  # Codex declares each MCP server's tools inside one
            tools += [_tool(c, namespace=str(t.get("name") or "")) for c in t.get("tools") or []
                      if isinstance(c, dict)]
    return SimRequest(wire=NAME, model=str(body.get("model") or "sim-1"), stream=bool(body.get("stream")),
                      messages=messages, tools=tools, system="\n".join(s for s in system if s), raw=body)


def _tool(t: dict[str, Any], namespace: str | None = None) -> ToolDecl:
    kind = "namespaced" if namespace else str(t.get("type") or "function")
    params = t.get("parameters") or {}
    return ToolDecl(name=str(t.get("name") or kind), kind=kind, namespace=namespace,
                    properties=dict(params.get("properties") or {}) if isinstance(params, dict) else {},
                    required=list(params.get("required") or []) if isinstance(params, dict) else [],
                    description=str(t.get("description") or ""))


def usage_json(u: Usage) -> dict[str, Any]:
    inp = u.input + u.cache_read + u.cache_write
    out = u.output + u.reasoning
    return {"input_tokens": inp, "input_tokens_details": {"cached_tokens": u.cache_read},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": u.reasoning},
            "total_tokens": inp + out}


def _items(reply: Reply) -> list[dict[str, Any]]:
    """The finished output items of a reply (text message first, then the calls)."""
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append({"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    for call in reply.calls:
        items.append(_call_item(call))
    return items


def _call_item(call: ToolCall) -> dict[str, Any]:
    suffix = call.id.removeprefix("call_")
    if call.kind == "custom":
        return {"id": f"ctc_{suffix}", "type": "custom_tool_call", "status": "completed",
                "call_id": call.id, "name": call.name, "input": call.arguments}
    if call.kind == "local_shell":
        return {"id": f"lsh_{suffix}", "type": "local_shell_call", "status": "completed",
                "call_id": call.id, "action": json.loads(call.arguments)}
    item = {"id": f"fc_{suffix}", "type": "function_call", "status": "completed",
            "call_id": call.id, "name": call.name, "arguments": call.arguments}
    if call.namespace:
        item["namespace"] = call.namespace
    return item


def _response(req: SimRequest, resp_id: str, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": resp_id, "object": "response", "created_at": int(time.time()), "status": status,
            "model": req.model, "output": output, "usage": usage, "error": None, "incomplete_details": None,
            "parallel_tool_calls": bool(req.raw.get("parallel_tool_calls", True)), "tool_choice": "auto",
            "tools": [], "metadata": {"simulator": "pilothouse sim"}}


def body(reply: Reply, req: SimRequest) -> dict[str, Any]:
    return _response(req, f"resp_{uuid.uuid4().hex[:24]}", "completed", _items(reply), usage_json(reply.usage))


def stream_frames(reply: Reply, req: SimRequest) -> list[bytes]:
    resp_id = f"resp_{uuid.uuid4().hex[:24]}"
    frames: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        payload = {"type": kind, "sequence_number": len(frames), **data}
        frames.append(f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode())

    emit("response.created", response=_response(req, resp_id, "in_progress", [], None))
    emit("response.in_progress", response=_response(req, resp_id, "in_progress", [], None))
    done = _items(reply)
    for index, item in enumerate(done):
        item_id = item["id"]
        if item["type"] == "message":
            text = item["content"][0]["text"]
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            part = {"type": "output_text", "text": "", "annotations": []}
            emit("response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=part)
            for piece in pieces(text):
                emit("response.output_text.delta", item_id=item_id, output_index=index, content_index=0,
                     delta=piece, logprobs=[])
            emit("response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text,
                 logprobs=[])
            emit("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                 part={**part, "text": text})
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            for piece in pieces(item["arguments"], 24):
                emit("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=piece)
            emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
                 arguments=item["arguments"])
        elif item["type"] == "custom_tool_call":
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                         "input": ""})
            for piece in pieces(item["input"], 24):
                emit("response.custom_tool_call_input.delta", item_id=item_id, output_index=index, delta=piece)
            emit("response.custom_tool_call_input.done", item_id=item_id, output_index=index, input=item["input"])
        else:
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress"})
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=_response(req, resp_id, "completed", done, usage_json(reply.usage)))
    return frames


def error_body(status: int, message: str, code: str, cue: ErrorCue | None) -> dict[str, Any]:
    kind = {401: "invalid_request_error", 400: "invalid_request_error"}.get(status, "server_error")
    error: dict[str, Any] = {"message": message, "type": kind, "param": None, "code": code}
    if status == 429:
        # Codex stops (no retries) on a usage_limit_reached type and reads resets_at from it
        error["type"] = "usage_limit_reached" if cue is not None and cue.window else "rate_limit_exceeded"
        if cue is not None:
            error["resets_at"] = limits.reset_epoch(cue)
            error["resets_in_seconds"] = limits.retry_after(cue)
    return {"error": error}
