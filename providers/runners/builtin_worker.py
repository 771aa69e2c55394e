"""The builtin worker process: an agent loop over an OpenAI-compatible chat-completions endpoint.

Started by builtin_start.py under `python -I -S`, like any other runner's binary (so it is confined,
timed and killed the same way). Its config arrives as one
JSON object on stdin — never argv, never the environment; the key itself is read from the
credential file in the run's sandbox, whose path is in the config. It prints one normalised
event per stdout line (kinds as in providers.contract_events) and saves the conversation after every
turn in the sandbox, so a resumed run continues the same session with the same tools.

Stdlib only (a fresh process per run has a 0.3 s budget for a whole explore run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TYPE_CHECKING = False  # typing costs the worker's start-up ~5 ms; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

if __package__:
    from pilothouse.providers.runners.builtin_count import counted_usage
    from pilothouse.providers.runners.builtin_http import ChatClient, ChatError
    from pilothouse.providers.runners.builtin_tools import MODE_TOOLS, Tools, tool_schemas
else:  # run as a plain script with `python -I -S` (see BuiltinRunner.build): siblings by path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from builtin_count import counted_usage  # type: ignore[no-redef]
    from builtin_http import ChatClient, ChatError  # type: ignore[no-redef]
    from builtin_tools import MODE_TOOLS, Tools, tool_schemas  # type: ignore[no-redef]

SYSTEM = (
    "You are a pilothouse worker: you carry out one bounded task inside a workdir with the tools "
    "you are given; paths are relative to the workdir and nothing outside it is reachable. Do only "
    "what the task asks, then answer with a short report that ends with the result block the task's "
    "instructions describe."
)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _save(path: Path, convo: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(convo, fh)
    os.replace(tmp, path)


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


# Without a server count, tokens are estimated at 4 characters a token (English prose and code
# average 3.5-4.5 with the common BPE tokenizers). Why not a tokenizer: the worker is stdlib-only
# with a 0.3 s start-up budget, and the tokenizer libraries on PyPI either fetch their vocabulary
# at run time (tiktoken) or need the model's own tokenizer file (tokenizers), which a local server
# does not hand out; an estimate that says it is one is what the operator needs for a budget.
CHARS_PER_TOKEN = 4


def _estimate(chars: int) -> int:
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _usage(answer: dict[str, Any], payload: dict[str, Any], count: Any = None) -> dict[str, Any]:
    """One turn's usage event: the server's usage (cached prompt tokens and reasoning tokens split
    out), else llama.cpp's `timings` counts, else the server's tokenizer's count of what was sent
    (`count`, builtin_count.py), else an estimate from the text sent and received."""
    u = answer.get("usage") or {}
    if _count(u.get("prompt_tokens")) or _count(u.get("completion_tokens")):
        prompt, completion = _count(u.get("prompt_tokens")), _count(u.get("completion_tokens"))
        cached = _count((u.get("prompt_tokens_details") or {}).get("cached_tokens"))
        reasoning = _count((u.get("completion_tokens_details") or {}).get("reasoning_tokens"))
        return {"kind": "usage", "input": max(prompt - cached, 0), "output": max(completion - reasoning, 0),
                "reasoning": reasoning, "cache_read": cached, "cache_write": 0, "cost": 0.0, "source": "measured"}
    t = answer.get("timings") or {}
    if _count(t.get("prompt_n")) or _count(t.get("predicted_n")):
        return {"kind": "usage", "input": _count(t.get("prompt_n")), "output": _count(t.get("predicted_n")),
                "reasoning": 0, "cache_read": _count(t.get("cache_n")), "cache_write": 0, "cost": 0.0,
                "source": "measured"}
    counted = count(answer, payload) if count is not None else None
    if counted is not None:
        return counted
    sent = len(json.dumps(payload["messages"])) + len(json.dumps(payload.get("tools") or []))
    out = len(answer["text"]) + sum(len(json.dumps(c.get("function") or {})) for c in answer["tool_calls"])
    return {"kind": "usage", "input": _estimate(sent), "output": _estimate(out),
            "reasoning": _estimate(len(answer["reasoning"])), "cache_read": 0, "cache_write": 0, "cost": 0.0,
            "source": "estimated"}


def _brief(name: str, args: dict[str, Any]) -> str:
    v = args.get("path") or args.get("command") or args.get("pattern") or ""
    return str(v).replace("\n", " ")[:160]


def _load_convo(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    task = Path(cfg["task_file"]).read_text(encoding="utf-8")
    if cfg.get("resume"):
        try:
            convo = json.loads(path.read_text())
        except (OSError, ValueError):
            raise ChatError(f"no saved session to resume in {path.parent}", "fatal") from None
        want = cfg.get("session_id")
        if want and want != convo.get("session_id"):
            raise ChatError(f"session {want} is not the session saved for this run "
                            f"({convo.get('session_id')})", "fatal")
        convo["messages"].append({"role": "user", "content": task})
        return convo
    return {"session_id": cfg.get("session_id") or os.urandom(16).hex(), "mode": cfg["mode"],
            "model": cfg["model"],
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]}


def run(cfg: dict[str, Any]) -> int:
    started = time.monotonic()
    timeout_s = float(cfg.get("timeout_s") or 1800)
    workdir = Path(cfg["workdir"])
    convo_path = Path(cfg["conversation"])
    convo = _load_convo(cfg, convo_path)
    emit({"kind": "session", "id": convo["session_id"]})
    # a resumed session keeps the tools of the mode it started in ("resume" itself means code)
    mode = convo.get("mode") or cfg["mode"]
    mode = "code" if mode == "resume" or mode not in MODE_TOOLS else mode
    key = None
    if cfg.get("key_file"):
        key = Path(cfg["key_file"]).read_text().strip() or None

    def progress() -> None:
        emit({"kind": "progress"})

    # dispatch owns the overall and idle timeouts; the socket timeout is only a backstop behind them
    client = ChatClient(cfg["base_url"], key, timeout_s=float(cfg.get("request_timeout_s") or timeout_s + 60),
                        on_progress=progress, proxy=cfg.get("proxy"), ca_pem=cfg.get("ca_pem"))
    tools = Tools(workdir, mode, env=dict(os.environ),
                  deadline=lambda: timeout_s - (time.monotonic() - started), on_progress=progress)
    schemas = tool_schemas(mode)
    counting = cfg.get("counting") if isinstance(cfg.get("counting"), dict) else None

    def count(answer: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any] | None:
        return counted_usage(counting, client.post_json, client.root, payload, answer) if counting else None
    step_cap = int(cfg.get("step_cap") or 50)
    steps = 0
    while True:
        if steps >= step_cap:
            emit({"kind": "limit", "reason": "step_cap", "steps": steps})
            return 0
        payload: dict[str, Any] = {"model": cfg["model"], "messages": convo["messages"], "tools": schemas,
                                   "stream": True, "stream_options": {"include_usage": True}}
        if cfg.get("max_tokens"):
            payload["max_tokens"] = int(cfg["max_tokens"])
        try:
            answer = client.complete(payload)
        except ChatError as exc:
            if exc.reached:  # sent, maybe worked on, counted by nobody
                emit({"kind": "usage", "input": 0, "output": 0, "reasoning": 0, "cache_read": 0,
                      "cache_write": 0, "cost": 0.0, "source": "unknown"})
            raise
        steps += 1
        emit(_usage(answer, payload, count))
        if answer["reasoning"]:
            emit({"kind": "reasoning", "text": answer["reasoning"]})
        if answer["text"]:
            emit({"kind": "text", "text": answer["text"]})
        if answer.get("finish_reason") == "length":
            emit({"kind": "limit", "reason": "output_cap"})
        msg: dict[str, Any] = {"role": "assistant", "content": answer["text"] or None}
        calls = answer["tool_calls"]
        if calls:
            msg["tool_calls"] = calls
        convo["messages"].append(msg)
        if not calls:
            _save(convo_path, convo)
            return 0
        for call in calls:
            fn = call.get("function") or {}
            name = str(fn.get("name") or "")
            try:
                args = json.loads(fn.get("arguments") or "{}")
                if not isinstance(args, dict):
                    raise ValueError
            except ValueError:
                args = None
            brief = _brief(name, args or {})
            emit({"kind": "tool", "name": name, "status": "started", "brief": brief})
            if args is None:
                status, out = "error", "tool arguments are not a JSON object"
            else:
                status, out = tools.run(name, args)
            emit({"kind": "tool", "name": name, "status": status, "brief": brief})
            convo["messages"].append({"role": "tool", "tool_call_id": call.get("id") or "", "content": out})
        _save(convo_path, convo)


def main() -> int:
    try:
        cfg = json.loads(sys.stdin.readline() or "{}")
        for field in ("base_url", "model", "mode", "workdir", "conversation", "task_file"):
            if field not in cfg:
                raise ValueError(f"missing {field}")
    except ValueError as exc:
        emit({"kind": "error", "message": f"builtin worker: bad config on stdin ({exc})", "error_class": "fatal"})
        return 2
    try:
        return run(cfg)
    except ChatError as exc:
        if exc.quota:
            emit({"kind": "quota", **exc.quota})
        emit({"kind": "error", "message": str(exc), "error_class": exc.error_class})
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug of ours: say so as an event; the traceback goes to stderr
        emit({"kind": "error", "message": f"builtin worker crashed: {type(exc).__name__}: {exc}",
              "error_class": "fatal"})
        raise


if __name__ == "__main__":
    sys.exit(main())
