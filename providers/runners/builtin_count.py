"""Counting a turn with the server's own tokenizer, for servers whose stream reports no usage
(llama-cpp-python's server sends neither `usage` nor llama.cpp's `timings` when streaming).

The capability probe (providers/capabilities.py `counting`) finds the tokenizer endpoint, whether
the chat template keeps the tool declarations (SmolLM2's drops them: counting their JSON made the
estimate 1.3-2.3x the server's count) and what the template adds per message; the worker then
counts what was really sent, over its own connection to the server. It is still labelled
`estimated`: the template's share is the probe's average, not the server's count of this prompt.
Stdlib only (the worker's start-up).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Post = Callable[[str, dict[str, Any]], Any]

# the endpoints that count a text's tokens, under the server's root: llama-cpp-python's, then
# llama.cpp's own server's
PATHS = ("/extras/tokenize/count", "/tokenize")


def content_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The text a chat template renders of `messages` (contents and tool calls), and of `tools`
    when the template keeps them."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append(str(fn.get("name") or "") + str(fn.get("arguments") or ""))
    if tools:
        parts.append(json.dumps(tools))
    return "\n".join(parts)


def tokenize_count(post: Post, path: str, text: str) -> int | None:
    """How many tokens the server's tokenizer at `path` makes of `text`, or None."""
    data = post(path, {"input": text} if path.endswith("/count") else {"content": text})
    n = data.get("count") if isinstance(data, dict) else None
    if n is None and isinstance(data, dict) and isinstance(data.get("tokens"), list):
        n = len(data["tokens"])
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def counted_usage(counting: dict[str, Any], post: Post, root: str, payload: dict[str, Any],
                  answer: dict[str, Any]) -> dict[str, Any] | None:
    """One turn's usage event counted by the server's tokenizer, or None when it cannot be."""
    path = counting.get("tokenizer")
    if path not in PATHS:
        return None
    tools = payload.get("tools") if counting.get("tools_counted") else None
    messages = payload.get("messages") or []
    sent = tokenize_count(post, root + path, content_text(messages, tools))
    said = tokenize_count(post, root + path, content_text(
        [{"content": answer.get("text") or "", "tool_calls": answer.get("tool_calls") or []}]))
    if sent is None or said is None:
        return None
    per = counting.get("per_message")
    per = per if isinstance(per, int) and not isinstance(per, bool) and 0 <= per < 64 else 0
    return {"kind": "usage", "input": sent + per * len(messages), "output": said, "reasoning": 0,
            "cache_read": 0, "cache_write": 0, "cost": 0.0, "source": "estimated"}
