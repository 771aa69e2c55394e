"""The codex runner: `codex exec --json` (@openai/codex, pinned in pins.py).

CODEX_HOME is the sandbox's config/codex: config.toml names one model provider `pilothouse`
(the provider's base URL, Responses wire) whose bearer token comes from a command reading the
sandbox's credential file (`[model_providers.pilothouse.auth]`), so the key is in no argv, no
environment and no config file. A model catalog written next to it gives Codex the model's
context window and tool set (apply_patch), which it cannot fetch for a non-OpenAI model.
Codex's own sandbox confines its commands (read-only for explore/review/plan/test,
workspace-write for code/resume) unless pilothouse's bwrap already does (see codex_sandbox). The prompt goes in on stdin (`-`), which Codex reads to EOF.

`turn.completed.usage` is cumulative over the thread; a resumed thread starts from the totals
its rollout file recorded, and each turn reports the difference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers.runners.base import LaunchSpec, RunSpec
from pilothouse.providers.runners.cli_common import CliRunner, epoch_iso, job_server, window_in

if TYPE_CHECKING:
    from pilothouse.providers.contract_events import RunnerEvent

PROVIDER_ID = "pilothouse"
WRITE_MODES = ("code", "resume")
_AUTH = re.compile(r"\b401\b|\b403\b|unauthori[sz]ed|invalid api key|authentication", re.I)
_QUOTA = re.compile(r"\b429\b|usage limit|rate limit|too many requests|quota", re.I)
_TRANSIENT = re.compile(r"\b5\d\d\b|stream disconnected|reconnecting|timed? ?out|connection", re.I)
_WINDOW = re.compile(r"\(([a-z0-9_]+) window\)|\b(five_hour|seven_day|weekly|daily|hourly)\b", re.I)
_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")
_MODEL_ITEMS = ("agent_message", "reasoning", *_TOOL_ITEMS)
_REFUSED = re.compile(r"read-only file system|permission denied|operation not permitted", re.I)
_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens",
               "reasoning_output_tokens")


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_sandbox(spec: RunSpec) -> str:
    """Codex's own sandbox for its commands. Inside pilothouse's bwrap (which already makes the
    filesystem read-only but for the run's dirs and, for writers, the worktree) Codex's bwrap
    cannot start: that confinement forbids nested user namespaces. So it runs unsandboxed there."""
    if spec.extra.get("bwrap"):  # set by dispatch: this launch will be wrapped in bubblewrap
        return "danger-full-access"
    return "workspace-write" if spec.mode in WRITE_MODES else "read-only"


def config_toml(spec: RunSpec, home: Path, sandbox: str) -> str:
    prov = spec.provider
    lines = [
        f"model = {toml_str(spec.model)}",
        f"model_provider = {toml_str(PROVIDER_ID)}",
        f"model_catalog_json = {toml_str(str(home / 'models.json'))}",
        'approval_policy = "never"',
        f"sandbox_mode = {toml_str(sandbox)}",
        "check_for_update_on_startup = false",
        "",
        "[history]", 'persistence = "none"', "",
        "[analytics]", "enabled = false", "",
        "[shell_environment_policy]", 'inherit = "core"', "",
        "[sandbox_workspace_write]", "network_access = false", "",
        f"[model_providers.{PROVIDER_ID}]",
        f"name = {toml_str(str(getattr(prov, 'display_name', PROVIDER_ID)))}",
        f"base_url = {toml_str(spec.base_url.rstrip('/'))}",
        'wire_api = "responses"',
        # one retry: a 401 or a usage limit must end the run in seconds, not after Codex's backoff
        "request_max_retries = 1",
        "stream_max_retries = 1",
    ]
    server = job_server(spec)
    if server is not None:
        # the job's read-only server; exec cannot ask, so its tools are approved
        lines += ["", f"[mcp_servers.{server['name']}]", f"command = {toml_str(server['command'])}",
                  f"args = [{', '.join(toml_str(a) for a in server['args'])}]",
                  'default_tools_approval_mode = "approve"', "startup_timeout_sec = 60"]
        # the first turn waits for the server's tool list (else a model may answer before it is there)
        lines.insert(lines.index("[history]"), "mcp_optional_startup_grace_ms = 30000")
    cred = spec.sandbox.credential
    if cred is not None:
        lines += ["", f"[model_providers.{PROVIDER_ID}.auth]", 'command = "/bin/cat"',
                  f"args = [{toml_str(str(cred))}]", "refresh_interval_ms = 0"]
    return "\n".join(lines) + "\n"


def model_catalog(spec: RunSpec) -> dict[str, Any]:
    prov = spec.provider
    return {"models": [{
        "slug": spec.model, "display_name": spec.model, "description": str(getattr(prov, "display_name", "")),
        "supports_reasoning_summaries": False, "support_verbosity": False, "default_verbosity": None,
        "apply_patch_tool_type": "freeform", "input_modalities": ["text"],
        "truncation_policy": {"mode": "tokens", "limit": 10000}, "supports_parallel_tool_calls": False,
        "context_window": int(getattr(prov, "context_tokens", 128000) or 128000),
        "reasoning_summary_format": "none", "default_reasoning_level": None, "supported_reasoning_levels": [],
        "shell_type": "shell_command", "visibility": "list", "minimal_client_version": "0.0.1",
        "supported_in_api": True, "upgrade": None, "priority": 0, "experimental_supported_tools": [],
        "base_instructions": BASE_INSTRUCTIONS,
    }]}


BASE_INSTRUCTIONS = (
    "You are a coding agent working in the user's repository through the tools you are given. "
    "Run shell commands with exec_command and change files with apply_patch. Keep to the task, "
    "verify what you change, and end with the result block the task asks for."
)


def rollout_totals(home: Path, thread_id: str) -> dict[str, int]:
    """The thread's cumulative usage as its rollout file last recorded it (zeros if none)."""
    for info in _rollout_values(home, thread_id, "token_count", "info", "total_token_usage"):
        return {k: int(info.get(k) or 0) for k in _USAGE_KEYS}
    return dict.fromkeys(_USAGE_KEYS, 0)


ROLLOUT_LIMIT = 256 << 20


def _rollout(home: Path, thread_id: str) -> list[str]:
    from fnmatch import fnmatchcase

    from pilothouse.providers import workerfs

    if not thread_id:
        return []
    # the sandbox HOME is the worker's to write, CODEX_HOME included: listed and read through the
    # door from the run's config folder above it (a linked folder or a rollout swapped for a link
    # is not followed, a FIFO not opened)
    want = f"rollout-*{thread_id}.jsonl"
    try:
        files = sorted(f.rel for f in workerfs.walk(home.parent, f"{home.name}/sessions", limit=ROLLOUT_LIMIT)
                       if fnmatchcase(f.rel.rsplit("/", 1)[-1], want))
        if not files:
            return []
        entry = workerfs.read(home.parent, files[-1], ROLLOUT_LIMIT)
    except (OSError, ValueError):
        return []
    return entry.data.decode("utf-8", errors="replace").splitlines() if entry.kind == "file" else []


def _rollout_values(home: Path, thread_id: str, marker: str, *keys: str) -> Iterator[Any]:
    """Newest first: payload[keys...] of each rollout line that mentions the key `marker`."""
    for line in reversed(_rollout(home, thread_id)):
        if f'"{marker}"' not in line:
            continue
        try:
            value = json.loads(line)["payload"]
            for key in keys:
                value = value[key]
        except (ValueError, KeyError, TypeError):
            continue
        yield value


def window_name(minutes: int | None) -> str:
    names = {300: "five_hour", 10080: "weekly", 1440: "daily", 60: "hourly"}
    if not minutes:
        return "unknown"
    return names.get(int(minutes), f"{int(minutes)}m")


def rollout_rate_limit(home: Path, thread_id: str) -> RunnerEvent | None:
    """The primary rate-limit window Codex last recorded for the thread, as a quota event."""
    from pilothouse.providers import contract_events as c

    for primary in _rollout_values(home, thread_id, "rate_limits", "rate_limits", "primary"):
        if not isinstance(primary, dict):
            continue
        resets_at = epoch_iso(primary.get("resets_at"))
        used = primary.get("used_percent")
        return c.QuotaEvent(window=window_name(primary.get("window_minutes")),
                            used_pct=float(used) if isinstance(used, (int, float)) else None, resets_at=resets_at)
    return None


def write_config(spec: RunSpec, sandbox: str) -> Path:
    """CODEX_HOME with the host's config.toml and model catalog. The folder is the worker's to
    write: claimed through the door and its host files written anew on every dispatch, a resume
    included (see claude_code.write_config)."""
    from pilothouse.providers import workerfs

    config = spec.sandbox.config
    home = config / "codex"
    workerfs.make_dir(config, "codex")
    workerfs.write(config, "codex/config.toml", config_toml(spec, home, sandbox))
    workerfs.write(config, "codex/models.json", json.dumps(model_catalog(spec), indent=2) + "\n")
    return home


class CodexRunner(CliRunner):
    name = "codex"
    npm_package = "@openai/codex"

    def __init__(self) -> None:
        self._last = dict.fromkeys(_USAGE_KEYS, 0)
        self._last_error: str | None = None
        self._home: Path | None = None
        self._thread: str | None = None
        self._read_only = False
        self._after_tool = False  # a tool finished: the next item comes from a new model response

    def build(self, spec: RunSpec) -> LaunchSpec:
        binary = self.require_binary()
        sandbox = codex_sandbox(spec)
        home = write_config(spec, sandbox)
        env = self.base_env(spec)
        env["CODEX_HOME"] = str(home)
        self._home, self._thread = home, spec.session_id
        self._read_only = spec.mode not in WRITE_MODES
        common = ["--json", "-m", spec.model, "-c", f"model_provider={PROVIDER_ID}", "--skip-git-repo-check",
                  "--ignore-rules"]
        if spec.session_id:
            self._last = rollout_totals(home, spec.session_id)
            # `exec resume` has no -C/--sandbox: the cwd and a config override say the same
            argv = [str(binary), "exec", "resume", *common, "-c", f"sandbox_mode={toml_str(sandbox)}",
                    spec.session_id, "-"]
        else:
            argv = [str(binary), "exec", *common, "-C", str(spec.workdir), "--sandbox", sandbox, "-"]
        return self.launch(spec, argv, env)

    def _events(self, d: dict[str, Any]) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        kind = d.get("type")
        if kind == "thread.started" and d.get("thread_id"):
            self._thread = str(d["thread_id"])
            return [c.SessionEvent(self._thread)]
        if kind in ("item.started", "item.completed"):
            item = d.get("item") or {}
            out: list[RunnerEvent] = []
            if item.get("type") in _MODEL_ITEMS:
                if self._after_tool:
                    # a new model response: the previous one is a step. Codex's stream reports tokens
                    # once per turn, but its rollout file has each response's running total already
                    totals = rollout_totals(self._home, self._thread) if self._home and self._thread else {}
                    out.append(self._usage_delta(totals))
                    self._after_tool = False
                if kind == "item.completed" and item.get("type") in _TOOL_ITEMS:
                    self._after_tool = True
            return out + _item_events(item, done=kind == "item.completed", read_only=self._read_only)
        if kind == "turn.completed":
            self._after_tool = False
            return [self._usage_delta(d.get("usage") or {})]
        if kind == "turn.failed":
            return self._error(str((d.get("error") or {}).get("message") or "turn failed"))
        if kind == "error":
            message = str(d.get("message") or "error")
            if message.lower().startswith("reconnecting"):
                return []  # Codex is retrying a dropped stream on its own
            return self._error(message)
        return []

    def _usage_delta(self, u: dict[str, Any]) -> RunnerEvent:
        from pilothouse.providers import contract_events as c

        # never below what was already reported (the rollout may lag the stream)
        now = {k: max(int(u.get(k) or 0), self._last[k]) for k in _USAGE_KEYS}
        delta = {k: now[k] - self._last[k] for k in _USAGE_KEYS}
        self._last = now
        cached = delta["cached_input_tokens"]
        reasoning = delta["reasoning_output_tokens"]
        # Codex counts cached input inside input_tokens and reasoning inside output_tokens
        return c.UsageEvent(input=max(0, delta["input_tokens"] - cached - delta["cache_write_input_tokens"]),
                            output=max(0, delta["output_tokens"] - reasoning), reasoning=reasoning,
                            cache_read=cached, cache_write=delta["cache_write_input_tokens"])

    def _error(self, message: str) -> list[RunnerEvent]:
        if message == self._last_error:
            return []  # Codex prints the same failure as `error` and again as `turn.failed`
        self._last_error = message
        events = classify_error(message)
        if events and events[0].kind == "quota" and self._home is not None and self._thread:
            # the message names no window; the rollout recorded the 429's x-codex-* headers
            limits = rollout_rate_limit(self._home, self._thread)
            if limits is not None:
                events[0] = limits
        return events


def classify_error(message: str) -> list[RunnerEvent]:
    from pilothouse.providers import contract_events as c

    if _AUTH.search(message):
        return [c.ErrorEvent(f"authentication failed: {message}", "auth")]
    if _QUOTA.search(message):
        return [c.QuotaEvent(window=window_in(_WINDOW, message)), c.ErrorEvent(f"rate limited: {message}", "quota")]
    if _TRANSIENT.search(message):
        return [c.ErrorEvent(message, "transient")]
    return [c.ErrorEvent(message, "fatal")]


def _item_events(item: dict[str, Any], done: bool, read_only: bool = False) -> list[RunnerEvent]:
    from pilothouse.providers import contract_events as c

    t = item.get("type")
    if t == "agent_message" and done and item.get("text"):
        return [c.TextEvent(str(item["text"]))]
    if t == "reasoning" and done and item.get("text"):
        return [c.ReasoningEvent(str(item["text"]))]
    if t == "command_execution":
        brief = str(item.get("command") or "")[:200]
        if not done:
            return [c.ToolEvent("exec_command", "started", brief)]
        status = str(item.get("status") or "")
        if status == "declined" or _REFUSED.search(str(item.get("aggregated_output") or "")):
            return [c.ToolEvent("exec_command", "denied", brief)]
        ok = status == "completed" and item.get("exit_code") in (0, None)
        return [c.ToolEvent("exec_command", "ok" if ok else "error", brief)]
    if t == "file_change":
        paths = ", ".join(str(ch.get("path")) for ch in item.get("changes") or [] if isinstance(ch, dict))
        if not done:
            return [c.ToolEvent("apply_patch", "started", paths[:200])]
        if str(item.get("status") or "") == "completed":
            return [c.ToolEvent("apply_patch", "ok", paths[:200])]
        # the stream gives no reason; in a read-only run a failed patch is the refusal
        return [c.ToolEvent("apply_patch", "denied" if read_only else "error", paths[:200])]
    if t in ("mcp_tool_call", "web_search"):
        name = str(item.get("tool") or t)
        if not done:
            return [c.ToolEvent(name, "started", "")]
        return [c.ToolEvent(name, "error" if item.get("status") == "failed" else "ok", "")]
    return []
