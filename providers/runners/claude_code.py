"""The claude-code runner: `claude -p --output-format stream-json --verbose` (pinned in pins.py).

CLAUDE_CONFIG_DIR and HOME are inside the run's sandbox; its settings.json holds the base URL
(settings `env`) and an `apiKeyHelper` that cats the sandbox's credential file, so the key is in
no argv and no environment. Only those user settings load (`--setting-sources user`), and no
MCP server from the repository (`--strict-mcp-config`): a task's repository cannot change where
the key goes or what runs. Retries are capped (CLAUDE_CODE_MAX_RETRIES) because the CLI's
default retries a 401 ten times with backoff (a minute); a bad key now ends in about a second.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers.runners.base import LaunchSpec, RunSpec
from pilothouse.providers.runners.cli_common import CliRunner, epoch_iso, job_server, window_in

if TYPE_CHECKING:
    from pilothouse.providers.contract_events import RunnerEvent

MAX_RETRIES = "1"
_DENIED = re.compile(r"permission|denied|haven't granted|not allowed|blocked|read-only file system|"
                     r"operation not permitted", re.I)
_WINDOW = re.compile(r"\(([a-z0-9_]+) window\)|\b(five_hour|seven_day|weekly|daily|hourly)\b", re.I)
READ_ONLY_BASH = ("ls", "grep", "rg", "find", "head", "tail", "wc", "pwd", "tree", "git status", "git log",
                  "git diff", "git show", "git blame")

# (tools available, tools allowed without asking, permission mode) per mode; anything that would
# need a prompt is denied in -p mode (dontAsk makes that explicit)
def tool_policy(mode: str) -> tuple[list[str], list[str], str]:
    if mode in ("code", "resume"):
        tools = ["Bash", "Read", "Write", "Edit", "Glob", "Grep"]
        return tools, tools, "acceptEdits"
    if mode == "test":
        return ["Bash", "Read", "Glob", "Grep"], ["Bash", "Read", "Glob", "Grep"], "dontAsk"
    allowed = ["Read", "Glob", "Grep"] + [f"Bash({c}:*)" for c in READ_ONLY_BASH]
    return ["Read", "Glob", "Grep", "Bash"], allowed, "dontAsk"


def settings(spec: RunSpec) -> dict[str, Any]:
    base = spec.base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]  # the CLI appends /v1/messages itself
    cred = spec.sandbox.credential
    helper = f"/bin/cat {shlex.quote(str(cred))}" if cred is not None else "echo no-key"
    return {
        "apiKeyHelper": helper,
        "env": {"ANTHROPIC_BASE_URL": base},
        "includeCoAuthoredBy": False,
        "cleanupPeriodDays": 3650,  # sessions are pruned with the sandbox (`maintain runs`)
    }


def write_config(spec: RunSpec) -> Path:
    """The run's CLAUDE_CONFIG_DIR with the host's settings.json. The folder is the worker's to
    write: it is made fresh through the door on every dispatch, a resume included (a `claude ->
    ~/.claude` link the last run left is replaced, never followed), and the host's file is written
    anew from the spec, never reused."""
    from pilothouse.providers import workerfs

    config = spec.sandbox.config
    workerfs.make_dir(config, "claude")
    workerfs.write(config, "claude/settings.json", json.dumps(settings(spec), indent=2) + "\n")
    return config / "claude"


class ClaudeCodeRunner(CliRunner):
    name = "claude-code"
    npm_package = "@anthropic-ai/claude-code"

    def __init__(self) -> None:
        self._tools: dict[str, str] = {}  # tool_use id -> tool name
        self._pending_id: str | None = None
        self._pending: dict[str, int] = {}
        self._emitted = dict.fromkeys(("input", "output", "cache_read", "cache_write"), 0)

    def build(self, spec: RunSpec) -> LaunchSpec:
        from pilothouse.providers import workerfs

        binary = self.require_binary()
        config = spec.sandbox.config
        cfg_dir = write_config(spec)
        env = self.base_env(spec)
        env.update({
            "CLAUDE_CONFIG_DIR": str(cfg_dir), "CLAUDE_CODE_MAX_RETRIES": MAX_RETRIES,
            "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
            "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1", "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
        })
        tools, allowed, perm = tool_policy(spec.mode)
        argv = [str(binary), "-p", "--output-format", "stream-json", "--verbose", "--model", spec.model,
                "--permission-mode", perm, "--tools", ",".join(tools), "--allowedTools", ",".join(allowed),
                "--max-turns", str(spec.step_cap), "--setting-sources", "user", "--strict-mcp-config"]
        server = job_server(spec)
        if server is not None:
            # the job's read-only server, from the run's config dir (--strict-mcp-config: no other);
            # -p cannot ask, so its tools are allowed
            mcp_json = cfg_dir / "mcp.json"
            workerfs.write(config, "claude/mcp.json", json.dumps({"mcpServers": {server["name"]: {
                "type": "stdio", "command": server["command"], "args": server["args"], "env": {}}}}) + "\n")
            argv[argv.index("--allowedTools") + 1] += f",mcp__{server['name']}"
            argv += ["--mcp-config", str(mcp_json)]
            # -p connects MCP servers in the background and may ask the model before the tools are
            # there: wait for the server (at most MCP_TIMEOUT ms: a Python start-up on a loaded machine)
            env.update({"MCP_CONNECTION_NONBLOCKING": "false", "MCP_TIMEOUT": "60000"})
        if spec.session_id:
            argv += ["--resume", spec.session_id]
        return self.launch(spec, argv, env)

    def _events(self, d: dict[str, Any]) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        kind, sub = d.get("type"), d.get("subtype")
        if kind == "system" and sub == "init" and d.get("session_id"):
            return [c.SessionEvent(str(d["session_id"]))]
        if kind == "system" and sub == "api_retry" and d.get("error_status") in (401, 403):
            return [c.ErrorEvent(f"authentication failed (HTTP {d['error_status']}); the CLI is retrying", "auth")]
        if kind == "assistant":
            return self._assistant(d.get("message") or {})
        if kind == "user":
            return self._tool_results((d.get("message") or {}).get("content"))
        if kind == "rate_limit_event":
            return [_quota_from_info(d.get("rate_limit_info") or {})]
        if kind == "result":
            return self._result(d)
        return []

    def _assistant(self, msg: dict[str, Any]) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        out: list[RunnerEvent] = []
        if msg.get("model") != "<synthetic>":  # the CLI's own error notes: no model turn
            mid = str(msg.get("id") or "")
            if mid != self._pending_id:
                out.extend(self._flush())
                self._pending_id = mid
            self._pending = _usage(msg.get("usage") or {})
        for block in msg.get("content") or []:
            t = block.get("type")
            if t == "text" and block.get("text"):
                out.append(c.TextEvent(str(block["text"])))
            elif t == "thinking" and block.get("thinking"):
                out.append(c.ReasoningEvent(str(block["thinking"])))
            elif t == "tool_use":
                name = str(block.get("name") or "tool")
                self._tools[str(block.get("id"))] = name
                out.append(c.ToolEvent(name, "started", _brief(block.get("input") or {})))
        return out

    def _tool_results(self, content: Any) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        out: list[RunnerEvent] = []
        if not isinstance(content, list):
            return out
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            name = self._tools.get(str(block.get("tool_use_id")), "tool")
            text = _text(block.get("content"))
            if not block.get("is_error"):
                out.append(c.ToolEvent(name, "ok", ""))
            else:
                out.append(c.ToolEvent(name, "denied" if _DENIED.search(text) else "error", text[:200]))
        return out

    def _flush(self, final: dict[str, int] | None = None, cost: float = 0.0) -> list[RunnerEvent]:
        """The usage of the message just finished (with the result's totals, the remainder)."""
        from pilothouse.providers import contract_events as c

        if final is not None:
            pending = {k: max(0, final.get(k, 0) - self._emitted[k]) for k in self._emitted}
        else:
            pending = self._pending
        had_turn = self._pending_id is not None
        self._pending_id, self._pending = None, {}
        if not had_turn and not any(pending.values()) and not cost:
            return []
        for k in self._emitted:
            self._emitted[k] += pending.get(k, 0)
        return [c.UsageEvent(input=pending.get("input", 0), output=pending.get("output", 0),
                             cache_read=pending.get("cache_read", 0), cache_write=pending.get("cache_write", 0),
                             cost=cost)]

    def _result(self, d: dict[str, Any]) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        out = self._flush(_usage(d.get("usage") or {}), float(d.get("total_cost_usd") or 0.0))
        if d.get("session_id"):
            out.insert(0, c.SessionEvent(str(d["session_id"])))
        if not d.get("is_error"):
            return out
        status = d.get("api_error_status")
        text = str(d.get("result") or d.get("subtype") or "error")
        if status in (401, 403) or "authenticate" in text.lower():
            out.append(c.ErrorEvent(f"authentication failed: {text}", "auth"))
        elif status == 429 or "rate limit" in text.lower() or "usage limit" in text.lower():
            out.append(c.QuotaEvent(window=window_in(_WINDOW, text)))
            out.append(c.ErrorEvent(f"rate limited: {text}", "quota"))
        elif d.get("subtype") == "error_max_turns":
            pass  # the step cap: the verdict says partial from the text it has
        elif isinstance(status, int) and (status >= 500 or status == 408):
            out.append(c.ErrorEvent(text, "transient"))
        else:
            out.append(c.ErrorEvent(text, "fatal"))
        return out


def _usage(u: dict[str, Any]) -> dict[str, int]:
    return {"input": int(u.get("input_tokens") or 0), "output": int(u.get("output_tokens") or 0),
            "cache_read": int(u.get("cache_read_input_tokens") or 0),
            "cache_write": int(u.get("cache_creation_input_tokens") or 0)}


def _quota_from_info(info: dict[str, Any]) -> RunnerEvent:
    from pilothouse.providers import contract_events as c

    resets_at = epoch_iso(info.get("resetsAt"))
    util = info.get("utilization")
    used = float(util) * 100 if isinstance(util, (int, float)) else (100.0 if info.get("status") == "rejected" else None)
    return c.QuotaEvent(window=str(info.get("rateLimitType") or "unknown"), used_pct=used, resets_at=resets_at)


def _brief(inp: dict[str, Any]) -> str:
    for key in ("file_path", "command", "pattern", "path", "description"):
        if inp.get(key):
            return str(inp[key])[:200]
    return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""
