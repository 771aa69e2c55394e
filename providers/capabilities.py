"""What a model behind an OpenAI-compatible chat endpoint can really do, found out by asking it.

Sending `tools` proves nothing: a server may drop them silently, or return tool calls only when
forced while the builtin runner sends `tool_choice: auto`. So the probe sends a few small real
requests and records what came back:

- streaming    a streamed request answers as an event stream;
- usage        the stream reports token usage (asked with stream_options.include_usage);
- tools_auto   a tool call comes back with `tool_choice: auto`, what the runners send;
- tools_forced a tool call comes back when the tool is forced;
- protocol     the answer ends with the result block it was asked for;
- context      the context length the server's model list states, else the provider YAML's;
- counting     for a server whose stream reports no usage: its tokenizer endpoint, whether its chat
               template keeps the tool declarations, and what the template adds per message, so
               the builtin worker counts each turn with the server's own tokenizer (`counting`).

Which runner needs what (`requirements`): the builtin runner and OpenCode drive the model through
this same chat API, so a builder needs tool calls with `auto` and the protocol; a reviewer and an
assigner answer in a result block (they may read with tools, but need not). Claude Code and Codex
speak their vendors' own APIs, which this probe does not: their capabilities are not judged.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

PROBE_PROMPTS = {
    "stream": "pilothouse capability probe: stream. Answer with the single word OK.",
    "tools_auto": ("pilothouse capability probe: tool call (auto). Read the file README.md with the read "
                   "tool; do not answer before you have called it."),
    "tools_forced": "pilothouse capability probe: tool call (forced). Read the file README.md.",
    "protocol": ('pilothouse capability probe: result block. End your answer with exactly this line:\n'
                 '<!--RESULT-->{"probe": "ok"}<!--/RESULT-->'),
}
_RESULT = re.compile(r"<!--RESULT-->\s*(\{.*?\})\s*<!--/RESULT-->", re.DOTALL)
MAX_TOKENS = 200
# a server's model list says its context length under one of these names (vLLM, llama.cpp, others)
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx",
                 "n_ctx_train")

CHAT_RUNNERS = ("builtin", "opencode")
ROLE_NEEDS = {"builder": ("tools_auto", "protocol"), "reviewer": ("protocol",), "assigner": ("protocol",)}
WHAT = {"streaming": "streamed answers", "tools_auto": "tool calls with tool_choice auto",
        "tools_forced": "tool calls when forced", "protocol": "the result-block protocol",
        "usage": "token usage in the stream"}


def requirements(runner: str, role: str) -> tuple[str, ...]:
    """The probed capabilities a runner's worker in this role cannot do without."""
    if runner not in CHAT_RUNNERS:
        return ()
    return ROLE_NEEDS.get(role, ROLE_NEEDS["builder"])


def lacking(caps: dict[str, Any] | None, runner: str, role: str) -> list[str]:
    """The required capabilities a probe found missing (nothing when there is no probe to judge by)."""
    if not caps or caps.get("error"):
        return []
    return [need for need in requirements(runner, role) if caps.get(need) is False]


def _tool(mode: str = "explore") -> list[dict[str, Any]]:
    from pilothouse.providers.runners.builtin_tools import tool_schemas

    return tool_schemas(mode)


def _ask(client: Any, model: str, prompt: str, **extra: Any) -> dict[str, Any]:
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
               "stream": True, "stream_options": {"include_usage": True}, **extra}
    return dict(client.complete(payload))


def probe(base_url: str, model: str, key: str | None, *, context_default: int | None = None,
          timeout_s: float = 60.0) -> dict[str, Any]:
    """Probe one model; every request is real. `error` is set when the endpoint could not be asked
    at all (then nothing else is known)."""
    from pilothouse.providers.runners.builtin_http import ChatClient, ChatError

    started = time.monotonic()
    out: dict[str, Any] = {"model": model, "streaming": None, "usage": None, "tools_auto": None,
                           "tools_forced": None, "protocol": None, "context_tokens": context_default,
                           "context_source": "provider yaml" if context_default else None, "error": None}
    try:
        client = ChatClient(base_url, key, timeout_s=timeout_s)
    except ChatError as exc:
        return {**out, "error": str(exc)}
    try:
        first = _ask(client, model, PROBE_PROMPTS["stream"])
        out["streaming"] = bool(first.get("streamed"))
        out["usage"] = bool(first.get("usage"))
        read = [t for t in _tool() if t["function"]["name"] == "read"]
        auto = _ask(client, model, PROBE_PROMPTS["tools_auto"], tools=read, tool_choice="auto")
        out["tools_auto"] = _called(auto, "read")
        forced = _ask(client, model, PROBE_PROMPTS["tools_forced"], tools=read,
                      tool_choice={"type": "function", "function": {"name": "read"}})
        out["tools_forced"] = _called(forced, "read")
        proto = _ask(client, model, PROBE_PROMPTS["protocol"])
        block = _RESULT.findall(proto.get("text") or "")
        out["protocol"] = bool(block) and _json(block[-1]) == {"probe": "ok"}
    except ChatError as exc:
        out["error"] = str(exc)
        out["error_class"] = exc.error_class
    finally:
        client.close()
    if out["error"] is None and out["usage"] is False:
        out["counting"] = _counting_with(base_url, model, key, timeout_s)
    if out["error"] is None:
        found = model_context(base_url, model, key, timeout_s)
        if found:
            out["context_tokens"], out["context_source"] = found, "server"
    out["duration_s"] = round(time.monotonic() - started, 3)
    return out


# what a counting probe sends: two messages, as a worker's first turn has (system, task)
_COUNT_MESSAGES = [{"role": "system", "content": "pilothouse capability probe: counting. You are a coding agent."},
                   {"role": "user", "content": "Read the file README.md and say in one sentence what it is."}]


def counting(client: Any, model: str) -> dict[str, Any] | None:
    """How to count a turn exactly where the stream reports no usage: the server's own prompt
    count (a non-streamed answer of one token, with and without the tools) against its tokenizer's
    count of the same text. None when the server has no tokenizer endpoint or counts nothing."""
    from pilothouse.providers.runners.builtin_count import PATHS, content_text, tokenize_count

    def prompt_tokens(**extra: Any) -> int | None:
        body = {"model": model, "messages": _COUNT_MESSAGES, "max_tokens": 1, "stream": False, **extra}
        answer = client.post_json(client.path, body)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    plain = prompt_tokens()
    if plain is None:
        return None
    with_tools = prompt_tokens(tools=[t for t in _tool() if t["function"]["name"] == "read"])
    for path in PATHS:
        counted = tokenize_count(client.post_json, client.root + path, content_text(_COUNT_MESSAGES))
        if counted is not None:
            return {"tokenizer": path, "tools_counted": bool(with_tools and with_tools > plain),
                    "per_message": max(0, round((plain - counted) / len(_COUNT_MESSAGES)))}
    return None


def _counting_with(base_url: str, model: str, key: str | None, timeout_s: float) -> dict[str, Any] | None:
    from pilothouse.providers.runners.builtin_http import ChatClient, ChatError

    try:
        client = ChatClient(base_url, key, timeout_s=timeout_s)
    except ChatError:
        return None
    try:
        return counting(client, model)
    finally:
        client.close()


def _called(answer: dict[str, Any], name: str) -> bool:
    return any((c.get("function") or {}).get("name") == name for c in answer.get("tool_calls") or [])


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def model_context(base_url: str, model: str, key: str | None, timeout_s: float) -> int | None:
    """The context length the server's GET /models states for `model`, when it states one."""
    import urllib.request

    req = urllib.request.Request(base_url.rstrip("/") + "/models",
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=min(timeout_s, 15)) as resp:
            data = json.loads(resp.read(1 << 20))
    except (OSError, ValueError):
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("id") != model:
            continue
        meta = entry.get("meta")
        for where in (entry, meta if isinstance(meta, dict) else {}):
            for k in _CONTEXT_KEYS:
                v = where.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return v
    return None


def summary(caps: dict[str, Any]) -> str:
    """One short line: what the model can and cannot do."""
    if caps.get("error"):
        return f"not probed: {caps['error']}"
    marks = []
    for k in ("streaming", "usage", "tools_auto", "tools_forced", "protocol"):
        v = caps.get(k)
        marks.append(f"{k}={'yes' if v else 'no' if v is False else '?'}")
    if isinstance(caps.get("counting"), dict):
        marks.append("counted=tokenizer")
    ctx = caps.get("context_tokens")
    if ctx:
        marks.append(f"context={ctx} ({caps.get('context_source')})")
    return " ".join(marks)
