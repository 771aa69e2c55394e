"""`pilothouse mcp` registered with a host agent, in that host's own config format.

  claude    $CLAUDE_CONFIG_DIR/.claude.json or ~/.claude.json   {"mcpServers": {"pilothouse": …}} (user scope)
  codex     $CODEX_HOME/config.toml or ~/.codex/config.toml     [mcp_servers.pilothouse]
  opencode  $XDG_CONFIG_HOME/opencode/opencode.json             {"mcp": {"pilothouse": …}}

Only our own entry is written or removed: the user's other servers, settings, comments (TOML) and
key order stay as they were, and the file keeps its permissions. A file we cannot parse is never
rewritten: the user gets one line naming it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pilothouse.providers.errors import UserError

HOSTS = ("claude", "codex", "opencode")
SERVER = "pilothouse"
# job_wait may block up to 600 s; Codex gives a tool call 60 s unless told otherwise
CODEX_TOOL_TIMEOUT_S = 660


def check_host(host: str) -> None:
    if host not in HOSTS:
        raise UserError(f"unknown host '{host}'; use one of {', '.join(HOSTS)}")


def config_path(host: str) -> Path:
    check_host(host)
    if host == "claude":
        return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home()).expanduser() / ".claude.json"
    if host == "codex":
        return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser() / "config.toml"
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base).expanduser() / "opencode" / "opencode.json"


def server_command() -> list[str]:
    """The argv that starts this installation's server: the `pilothouse` script installed beside
    this Python, by its absolute path (what a host's PATH may not have), else this Python running
    the package isolated. The host agent starts it in the repository, a tree workers' branches were
    merged into: plain `python -m pilothouse` puts that directory first on the import path, and a
    planted `pilothouse/` package there would run as the operator before pilothouse's own code could
    drop it. A console script's path starts with its own folder instead; `-I` leaves the cwd out."""
    from pilothouse.providers.hostpython import python_argv

    script = Path(sys.executable).parent / "pilothouse"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute()), "mcp"]
    return python_argv("-m", "pilothouse", "mcp")


def register(host: str) -> list[str]:
    """Add (or refresh) our server in the host's config; what changed, for the CLI to print."""
    path = config_path(host)
    cmd = server_command()
    if host == "codex":
        changed = _edit_toml(path, lambda servers: _set(servers, SERVER, _toml_table({
            "command": cmd[0], "args": cmd[1:], "tool_timeout_sec": CODEX_TOOL_TIMEOUT_S})))
    else:
        key, entry = (("mcpServers", {"type": "stdio", "command": cmd[0], "args": cmd[1:], "env": {}})
                      if host == "claude" else ("mcp", {"type": "local", "command": cmd, "enabled": True}))
        changed = _edit_json(path, key, lambda servers: _set(servers, SERVER, entry))
    return [f"registered the pilothouse MCP server with {host} in {path}"] if changed else []


def unregister(host: str) -> list[str]:
    path = config_path(host)
    if not path.exists():
        return []
    if host == "codex":
        changed = _edit_toml(path, lambda servers: _drop(servers, SERVER))
    else:
        changed = _edit_json(path, "mcpServers" if host == "claude" else "mcp", lambda s: _drop(s, SERVER))
    return [f"removed the pilothouse MCP server from {host} ({path})"] if changed else []


def registered(host: str) -> dict[str, Any] | None:
    """Our entry in the host's config, or None."""
    path = config_path(host)
    if not path.exists():
        return None
    if host == "codex":
        servers = _load_toml(path).get("mcp_servers") or {}
    else:
        servers = _load_json(path).get("mcpServers" if host == "claude" else "mcp") or {}
    entry = servers.get(SERVER) if isinstance(servers, dict) else None
    return json.loads(json.dumps(entry)) if entry is not None else None


def _set(servers: Any, name: str, entry: dict[str, Any]) -> bool:
    if json.loads(json.dumps(servers.get(name))) == entry:
        return False
    servers[name] = entry
    return True


def _drop(servers: Any, name: str) -> bool:
    if name not in servers:
        return False
    del servers[name]
    return True


def _target(path: Path) -> Path:
    # a dotfile manager's symlink stays a symlink: the file it points at is the one edited
    return path.resolve() if path.is_symlink() else path


def _write(path: Path, text: str) -> None:
    from pilothouse.providers.fsutil import atomic_write_text

    path = _target(path)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600  # a host's config may hold its own tokens
    atomic_write_text(path, text, mode)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc}): fix its permissions or encoding") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.args[0]}); fix it, then run this again "
                        "(comments are not JSON)") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object at the top; fix it, then run this again")
    return data


def _edit_json(path: Path, key: str, change: Any) -> bool:
    data = _load_json(path)
    servers = data.get(key)
    if servers is None:
        servers = data[key] = {}
    if not isinstance(servers, dict):
        raise UserError(f"{path}: '{key}' is not an object; fix it, then run this again")
    if not change(servers):
        return False
    if not servers:
        del data[key]
    _write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return True


def _load_toml(path: Path) -> Any:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return tomlkit.document()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc}): fix its permissions or encoding") from None
    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}); fix it, then run this again") from None


def _toml_table(entry: dict[str, Any]) -> Any:
    import tomlkit

    table = tomlkit.table()
    for k, v in entry.items():
        table.add(k, v)
    table.add(tomlkit.nl())  # the blank line before the user's next table
    return table


def _edit_toml(path: Path, change: Any) -> bool:
    import tomlkit

    doc = _load_toml(path)
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    if not isinstance(servers, dict):
        raise UserError(f"{path}: mcp_servers is not a table; fix it, then run this again")
    if not change(servers):
        return False
    if not servers:
        del doc["mcp_servers"]
    _write(path, tomlkit.dumps(doc))
    return True
