"""Anthropic Messages (`POST /v1/messages`): what Claude Code speaks.

Streams message_start (with usage), content blocks (text_delta, input_json_delta), then
message_delta (stop_reason end_turn | tool_use, cumulative usage) and message_stop.

Usage keeps Anthropic's split: input_tokens = uncached input, cache_read_input_tokens,
cache_creation_input_tokens; output_tokens = output + reasoning (thinking is billed as output).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pilothouse.providers.sim.request import Message, Reply, SimRequest, ToolDecl, Usage, content_text, pieces
from pilothouse.providers.sim.scenario import ErrorCue

NAME = "messages"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def parse(body: dict[str, Any]) -> SimRequest:
    system = content_text(body.get("system"))
    messages: list[Message] = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role") or "user")
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        if role == "user" and blocks and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            role = "tool"  # a turn that only hands back tool results is not the user talking
        text = content_text(content)
        if role == "assistant":
            text += "".join(json.dumps(b.get("input")) for b in blocks
                            if isinstance(b, dict) and b.get("type") == "tool_use")
        messages.append(Message(role, text, assistant_output=role == "assistant"))
    tools = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict) or not t.get("name"):
            continue
        schema = t.get("input_schema") or {}
        kind = "function" if t.get("type") in (None, "custom") else str(t["type"])
        tools.append(ToolDecl(name=str(t["name"]), kind=kind, properties=dict(schema.get("properties") or {}),
                              required=list(schema.get("required") or []),
                              description=str(t.get("description") or "")))
    return SimRequest(wire=NAME, model=str(body.get("model") or "sim-1"), stream=bool(body.get("stream")),
                      messages=messages, tools=tools, system=system, raw=body)


def usage_json(u: Usage, output: bool = True) -> dict[str, Any]:
    return {"input_tokens": u.input, "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cache_read, "output_tokens": (u.output + u.reasoning) if output else 0,
            "service_tier": "standard"}


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.calls:
        blocks.append({"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
                       "input": json.loads(call.arguments) if call.kind == "function" else {"input": call.arguments}})
    return blocks


def _stop_reason(reply: Reply) -> str:
    if reply.cut:
        return "max_tokens"
    return "tool_use" if reply.calls else "end_turn"


def body(reply: Reply, req: SimRequest) -> dict[str, Any]:
    return {"id": f"msg_sim{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant", "model": req.model,
            "content": _blocks(reply), "stop_reason": _stop_reason(reply), "stop_sequence": None,
            "usage": usage_json(reply.usage)}


def stream_frames(reply: Reply, req: SimRequest) -> list[bytes]:
    frames: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        payload = {"type": kind, **data}
        frames.append(f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode())

    message = {"id": f"msg_sim{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant", "model": req.model,
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": usage_json(reply.usage, output=False)}
    emit("message_start", message=message)
    emit("ping")
    for index, block in enumerate(_blocks(reply)):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in pieces(block["text"]):
                emit("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in pieces(json.dumps(block["input"]), 24):
                emit("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
        emit("content_block_stop", index=index)
    emit("message_delta", delta={"stop_reason": _stop_reason(reply), "stop_sequence": None},
         usage=usage_json(reply.usage))
    emit("message_stop")
    return frames


def error_body(status: int, message: str, code: str, cue: ErrorCue | None) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": f"req_sim{uuid.uuid4().hex[:20]}"}
