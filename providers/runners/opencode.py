"""The opencode runner: `opencode run --format json` (opencode-ai, pinned in pins.py).

Config goes inline (OPENCODE_CONFIG_CONTENT): one provider `pilothouse` pointing at the
provider's base URL, its model with limits and prices, and the mode's permissions. The key is
not in it: `apiKey` is `{file:<sandbox credential>}`, which opencode reads itself. HOME and
XDG_* point into the run's sandbox, so sessions, logs and caches stay there; the project's own
opencode.json, models.dev fetches, autoupdate, sharing and default plugins are switched off.

opencode retries a 429 on its own (up to 5 times, honouring retry-after: minutes) and prints
nothing meanwhile. A small plugin (written into the sandbox) reports each retry on stdout; a
rate-limit retry ends the run at once so the verdict is `quota` and the supervisor decides
when to try again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers.runners.base import LaunchSpec, RunSpec
from pilothouse.providers.runners.cli_common import CliRunner, job_server, window_in

if TYPE_CHECKING:
    from pilothouse.providers.contract_events import RunnerEvent

PROVIDER_ID = "pilothouse"
_RATE_LIMIT = re.compile(r"\b429\b|rate.?limit|quota|usage limit|too many requests", re.I)
_WINDOW = re.compile(r"\(([a-z0-9_]+) window\)|\b(five_hour|seven_day|weekly|daily|hourly|minute)\b", re.I)
_DENIED = re.compile(r"permission|denied|rejected|not allowed", re.I)
_REFUSED = re.compile(r"read-only file system|permission denied|operation not permitted", re.I)

# Read-only commands explore/review/plan may run; everything else in bash is denied.
READ_ONLY_BASH = ("ls*", "cat *", "head *", "tail *", "wc *", "grep *", "rg *", "find *", "tree*",
                  "git status*", "git log*", "git diff*", "git show*", "git blame*", "pwd")

PLUGIN_JS = """\
// pilothouse: report opencode's silent retries on stdout; end the run on a rate limit.
const RATE = /\\b429\\b|rate.?limit|quota|usage limit|too many requests/i;
export const PilothouseRetry = async () => ({
  event: async ({ event }) => {
    if (event.type !== "session.status" || event.properties.status.type !== "retry") return;
    const s = event.properties.status;
    process.stdout.write(JSON.stringify({ type: "pilothouse.retry", sessionID: event.properties.sessionID,
      attempt: s.attempt, message: s.message, next: s.next }) + "\\n");
    if (RATE.test(String(s.message))) process.exit(75);
  },
});
"""


def permissions(mode: str) -> dict[str, Any]:
    base: dict[str, Any] = {"webfetch": "deny", "websearch": "deny", "task": "deny",
                            "external_directory": "deny"}
    if mode in ("code", "resume"):
        return {**base, "edit": "allow", "bash": "allow"}
    if mode == "test":
        return {**base, "edit": "deny", "bash": "allow"}
    bash: dict[str, str] = {"*": "deny"}
    bash.update(dict.fromkeys(READ_ONLY_BASH, "allow"))
    return {**base, "edit": "deny", "bash": bash}


def config(spec: RunSpec, plugin_path: str) -> dict[str, Any]:
    prov = spec.provider
    options: dict[str, Any] = {"baseURL": spec.base_url}
    if spec.sandbox.credential is not None:
        options["apiKey"] = "{file:" + str(spec.sandbox.credential) + "}"
    model: dict[str, Any] = {"name": spec.model,
                             "limit": {"context": int(getattr(prov, "context_tokens", 128000) or 128000),
                                       "output": int(getattr(prov, "output_tokens", 8192) or 8192)}}
    cost = getattr(prov, "cost", None)
    if cost is not None:
        model["cost"] = {"input": float(getattr(cost, "input", 0) or 0),
                         "output": float(getattr(cost, "output", 0) or 0)}
    full = f"{PROVIDER_ID}/{spec.model}"
    server = job_server(spec)
    # timeout: how long opencode waits for the server's tool list (its default, 5 s, is less than a
    # Python server's start-up on a loaded machine, and a late server is dropped for the whole run)
    mcp = {} if server is None else {"mcp": {server["name"]: {
        "type": "local", "command": [server["command"], *server["args"]], "enabled": True, "timeout": 60000}}}
    return {**mcp,
        "autoupdate": False, "share": "disabled", "snapshot": False,
        "plugin": ["file://" + plugin_path],
        "model": full, "small_model": full, "enabled_providers": [PROVIDER_ID],
        "provider": {PROVIDER_ID: {"npm": "@ai-sdk/openai-compatible",
                                   "name": str(getattr(prov, "display_name", PROVIDER_ID)),
                                   "options": options, "models": {spec.model: model}}},
        "permission": permissions(spec.mode),
    }


def write_config(spec: RunSpec, version: str) -> Path:
    """The host's files in the run's config folder (the retry plugin, the dependency stamp); the
    folder is the worker's to write, so they are written anew through the door on every dispatch,
    a resume included (see claude_code.write_config). Returns the plugin's path."""
    from pilothouse.providers import workerfs

    workerfs.write(spec.sandbox.config, "pilothouse-retry.js", PLUGIN_JS)
    _mark_config_deps_installed(spec.sandbox.config, version)
    return spec.sandbox.config / "pilothouse-retry.js"


class OpenCodeRunner(CliRunner):
    name = "opencode"
    npm_package = "opencode-ai"

    def __init__(self) -> None:
        self._session: str | None = None

    def build(self, spec: RunSpec) -> LaunchSpec:
        binary = self.require_binary()
        plugin = write_config(spec, self.pin.version)
        env = self.base_env(spec)
        env.update({
            "OPENCODE_CONFIG_CONTENT": json.dumps(config(spec, str(plugin))),
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1", "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
            # a one-shot run needs no inotify watch over the whole worktree
            "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
        })
        # --title: without it opencode first asks the model for a session title (an extra,
        # unaccounted request on the user's quota)
        argv = [str(binary), "run", "--format", "json", "-m", f"{PROVIDER_ID}/{spec.model}",
                "--title", f"pilothouse {spec.run_id}"]
        if spec.session_id:
            argv += ["--session", spec.session_id]
        return self.launch(spec, argv, env)

    def _events(self, d: dict[str, Any]) -> list[RunnerEvent]:
        from pilothouse.providers import contract_events as c

        out: list[RunnerEvent] = []
        sid = d.get("sessionID")
        if isinstance(sid, str) and sid != self._session:
            self._session = sid
            out.append(c.SessionEvent(sid))
        kind = d.get("type")
        part = d.get("part") or {}
        if kind == "text" and part.get("text"):
            out.append(c.TextEvent(str(part["text"])))
        elif kind == "reasoning" and part.get("text"):
            out.append(c.ReasoningEvent(str(part["text"])))
        elif kind == "tool_use" and part.get("tool"):
            out.append(_tool_event(part))
        elif kind == "step_finish":
            tok = part.get("tokens") or {}
            cache = tok.get("cache") or {}
            out.append(c.UsageEvent(input=int(tok.get("input") or 0), output=int(tok.get("output") or 0),
                                    reasoning=int(tok.get("reasoning") or 0),
                                    cache_read=int(cache.get("read") or 0), cache_write=int(cache.get("write") or 0),
                                    cost=float(part.get("cost") or 0.0)))
        elif kind == "error":
            out.extend(_error_events(d.get("error") or {}))
        elif kind == "pilothouse.retry":
            message = str(d.get("message") or "")
            if _RATE_LIMIT.search(message):
                out.append(c.QuotaEvent(window=window_of(message)))
                out.append(c.ErrorEvent(f"rate limited: {message}", "quota"))
        return out


def _mark_config_deps_installed(config: Path, version: str) -> None:
    """opencode `npm install`s @opencode-ai/plugin into its config dir on every start unless
    node_modules exists and package-lock.json already lists every dependency: a network call per
    run (25 s here; a hang offline). Our plugin needs no dependency, so say it is installed."""
    from pilothouse.providers import workerfs

    workerfs.make_dir(config, "opencode/node_modules")
    deps = {"@opencode-ai/plugin": version}
    workerfs.write(config, "opencode/package.json", json.dumps({"dependencies": deps}) + "\n", 0o644)
    workerfs.write(config, "opencode/package-lock.json", json.dumps(
        {"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}) + "\n", 0o644)


def window_of(message: str) -> str:
    return window_in(_WINDOW, message)


def _tool_event(part: dict[str, Any]) -> RunnerEvent:
    from pilothouse.providers import contract_events as c

    state = part.get("state") or {}
    name = str(part.get("tool") or "tool")
    inp = state.get("input") or {}
    brief = str(state.get("title") or inp.get("filePath") or inp.get("command") or inp.get("pattern") or "")
    if state.get("status") == "completed":
        meta = state.get("metadata") or {}
        exit_code = meta.get("exit") if isinstance(meta, dict) else None
        if exit_code not in (0, None) and _REFUSED.search(str(state.get("output") or "")):
            return c.ToolEvent(name, "denied", brief[:200])  # the kernel refused a write (confinement)
        return c.ToolEvent(name, "ok", brief[:200])
    error = str(state.get("error") or "")
    status = "denied" if _DENIED.search(error) else "error"
    return c.ToolEvent(name, status, (f"{brief}: {error}" if brief else error)[:200])


def _error_events(err: dict[str, Any]) -> list[RunnerEvent]:
    from pilothouse.providers import contract_events as c

    data = err.get("data") or {}
    name = str(err.get("name") or "error")
    message = str(data.get("message") or name)
    status = data.get("statusCode")
    if status in (401, 403) or name == "ProviderAuthError":
        return [c.ErrorEvent(f"authentication failed ({status or name}): {message}", "auth")]
    if status == 429 or _RATE_LIMIT.search(message):
        return [c.QuotaEvent(window=window_of(message)), c.ErrorEvent(f"rate limited: {message}", "quota")]
    transient = (isinstance(status, int) and status >= 500) or bool(data.get("isRetryable"))
    return [c.ErrorEvent(f"{name}: {message}", "transient" if transient else "fatal")]
