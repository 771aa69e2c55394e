"""The sim imitating a real server's gaps: the `server:` switches of a scenario (ServerSpec).

Real OpenAI-compatible servers differ from the protocol in ways pilothouse must notice: llama.cpp
streams without usage even when asked, drops `tools` without a word, or calls tools only when
`tool_choice` forces it; every server cuts an answer at the output cap with `finish_reason: length`.
This module is the one place those behaviours live; the engine and the wire modules only ask it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pilothouse.providers.sim.request import Reply, SimRequest

if TYPE_CHECKING:
    from pilothouse.providers.sim.scenario import ServerSpec

CHARS_PER_TOKEN = 4  # the sim's own token count (engine.usage_for): 4 characters a token


def forced(tool_choice: Any) -> bool:
    """Whether a request's tool_choice forces a tool call, in any wire's spelling: "required" (chat,
    Responses), {"type": "any"|"tool"} (Messages), a named function ({"type": "function", …})."""
    if isinstance(tool_choice, str):
        return tool_choice in ("required", "any")
    if isinstance(tool_choice, dict):
        return tool_choice.get("type") in ("function", "tool", "any", "required")
    return False


def calls_allowed(spec: ServerSpec | None, request: SimRequest) -> bool:
    """Whether this answer may carry tool calls. `tools: drop` also empties the request's tool list,
    so the answer's prompt count is that of a request without tools, as a real server's is."""
    if spec is None or spec.tools == "honour":
        return True
    if spec.tools == "drop":
        request.tools = []
        return False
    return forced(request.raw.get("tool_choice"))


def output_cap(spec: ServerSpec | None, request: SimRequest) -> int | None:
    """The output tokens an answer may have: the server's cap or the request's max_tokens, the smaller
    (none without an `output_cap` switch: the scripted answer is what the scenario says)."""
    if spec is None or spec.output_cap is None:
        return None
    caps = [spec.output_cap] if isinstance(spec.output_cap, int) else []
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = request.raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            caps.append(value)
    return min(caps) if caps else None


def cut(reply: Reply, cap: int | None) -> Reply:
    """The reply cut at `cap` output tokens: text truncated, tool calls gone (a call cut half-way is
    no call), finish_reason length. A reply within the cap is returned as it is."""
    if cap is None or reply.usage.output <= cap:
        return reply
    usage = replace(reply.usage, output=cap)
    return replace(reply, text=reply.text[:cap * CHARS_PER_TOKEN], calls=[], usage=usage, cut=True)


def shows_usage(spec: ServerSpec | None, streamed: bool) -> bool:
    """Whether an answer carries a usage object at all (`usage: omit_streamed | omit`)."""
    if spec is None or spec.usage == "report":
        return True
    return spec.usage == "omit_streamed" and not streamed
