"""OpenAI chat completions (`POST /v1/chat/completions`): the builtin runner and OpenCode.

Usage folds into OpenAI's convention: prompt_tokens = input + cache_read + cache_write with
prompt_tokens_details.cached_tokens = cache_read; completion_tokens = output + reasoning with
completion_tokens_details.reasoning_tokens = reasoning.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pilothouse.providers.sim.request import Message, Reply, SimRequest, ToolDecl, Usage, content_text, pieces

NAME = "chat"


def parse(body: dict[str, Any]) -> SimRequest:
    messages = []
    system = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "user"))
        text = content_text(m.get("content"))
        if role in ("system", "developer"):
            system.append(text)
            messages.append(Message("system", text))
            continue
        calls = m.get("tool_calls") or []
        if calls:
            text += "".join(json.dumps(c.get("function", {})) for c in calls if isinstance(c, dict))
        messages.append(Message(role, text, assistant_output=role == "assistant"))
    tools = []
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            params = fn.get("parameters") or {}
            tools.append(ToolDecl(name=str(fn["name"]), properties=dict(params.get("properties") or {}),
                                  required=list(params.get("required") or []),
                                  description=str(fn.get("description") or "")))
    opts = body.get("stream_options") or {}
    return SimRequest(wire=NAME, model=str(body.get("model") or "sim-1"), stream=bool(body.get("stream")),
                      messages=messages, tools=tools, system="\n".join(system),
                      include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")), raw=body)


def usage_json(u: Usage) -> dict[str, Any]:
    prompt = u.input + u.cache_read + u.cache_write
    completion = u.output + u.reasoning
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": u.cache_read},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning}}


def _id(reply: Reply) -> str:
    return "chatcmpl-sim" + uuid.uuid4().hex[:20]


def body(reply: Reply, req: SimRequest) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
    return {"id": _id(reply), "object": "chat.completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": "pilothouse-sim",
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}],
            **({"usage": usage_json(reply.usage)} if reply.show_usage else {})}


def stream_frames(reply: Reply, req: SimRequest) -> list[bytes]:
    base = {"id": _id(reply), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": req.model, "system_fingerprint": "pilothouse-sim"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": piece}) for piece in pieces(reply.text)]
    for index, call in enumerate(reply.calls):
        frames.append(chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                             "function": {"name": call.name, "arguments": ""}}]}))
        frames += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in pieces(call.arguments, 24)]
    usage = usage_json(reply.usage)
    if not reply.show_usage:  # a server that never streams usage, asked or not (imitate.py)
        frames.append(chunk({}, reply.finish))
    elif req.include_usage:
        # OpenAI's shape: the finish chunk, then a chunk with no choices carrying usage
        frames.append(chunk({}, reply.finish))
        frames.append(b"data: " + json.dumps({**base, "choices": [], "usage": usage}, separators=(",", ":")).encode() + b"\n\n")
    else:
        frames.append(chunk({}, reply.finish, usage=usage))
    frames.append(b"data: [DONE]\n\n")
    return frames


def error_body(status: int, message: str, code: str, cue: Any = None) -> dict[str, Any]:
    kinds = {401: "invalid_request_error", 429: "requests", 400: "invalid_request_error"}
    return {"error": {"message": message, "type": kinds.get(status, "server_error"), "param": None, "code": code}}
