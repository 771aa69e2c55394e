"""`pilothouse install/uninstall host claude|codex|opencode`: our MCP server in each host's own config,
beside the user's other servers and settings, which stay as they were; the real host CLIs read it."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from support import guard

CODEX_BEFORE = """# my codex settings
model = "o3"  # the one I like

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]

[profiles.fast]
model = "mini"
"""
JSON_BEFORE = {
    "claude": {"theme": "dark", "projects": {"/src/x": {"allowedTools": []}},
               "mcpServers": {"docs": {"type": "stdio", "command": "docs-mcp", "args": [], "env": {"A": "1"}}}},
    "opencode": {"$schema": "https://opencode.ai/config.json", "theme": "tokyonight",
                 "mcp": {"docs": {"type": "local", "command": ["docs-mcp"], "enabled": True}}},
}


def config(home: Path, host: str) -> Path:
    return {"claude": home / ".claude.json", "codex": home / ".codex" / "config.toml",
            "opencode": home / ".config" / "opencode" / "opencode.json"}[host]


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("host", ["claude", "codex", "opencode"])
def test_install_host_adds_only_our_server_and_uninstall_takes_it_out(cli, isolated_home, host):
    from pilothouse.providers.mcp_hosts import server_command

    path = config(isolated_home, host)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = CODEX_BEFORE if host == "codex" else json.dumps(JSON_BEFORE[host], indent=2) + "\n"
    path.write_text(before)
    path.chmod(0o600)
    assert f"registered the pilothouse MCP server with {host} in {path}" in ok(cli("install", "host", host))
    cmd = server_command()
    if host == "codex":
        import tomllib

        doc = tomllib.loads(path.read_text())
        assert doc["mcp_servers"]["pilothouse"] == {"command": cmd[0], "args": cmd[1:], "tool_timeout_sec": 660}
        assert doc["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--port", "0"]}
        assert doc["model"] == "o3" and doc["profiles"] == {"fast": {"model": "mini"}}
        assert "# the one I like" in path.read_text()
    else:
        doc = json.loads(path.read_text())
        key = "mcpServers" if host == "claude" else "mcp"
        want = ({"type": "stdio", "command": cmd[0], "args": cmd[1:], "env": {}} if host == "claude"
                else {"type": "local", "command": cmd, "enabled": True})
        assert doc[key].pop("pilothouse") == want
        assert doc == JSON_BEFORE[host]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "nothing to change" in ok(cli("install", "host", host))
    assert f"removed the pilothouse MCP server from {host}" in ok(cli("uninstall", "host", host))
    assert path.read_text() == before
    assert "nothing to change" in ok(cli("uninstall", "host", host))


def test_install_host_writes_the_skill_beside_the_server_and_uninstall_removes_both(cli, isolated_home):
    ok(cli("install", "sim-claude", "on", "claude"))
    skill = isolated_home / ".claude" / "skills" / "pilothouse" / "SKILL.md"
    skill.unlink()
    out = ok(cli("install", "host", "claude"))
    assert "registered the pilothouse MCP server with claude" in out and skill.is_file()
    out = ok(cli("uninstall", "host", "claude"))
    assert "removed the pilothouse MCP server from claude" in out and not skill.exists()
    assert "mcpServers" not in json.loads(config(isolated_home, "claude").read_text())


def test_a_config_we_cannot_parse_is_never_rewritten(cli, isolated_home):
    path = config(isolated_home, "opencode")
    path.parent.mkdir(parents=True)
    path.write_text('{\n  // my comment\n  "theme": "x"\n}\n')
    r = cli("install", "host", "opencode")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{path}: not valid JSON" in r.stderr and "Traceback" not in r.stderr
    assert path.read_text() == '{\n  // my comment\n  "theme": "x"\n}\n'
    toml = config(isolated_home, "codex")
    toml.parent.mkdir(parents=True)
    toml.write_text("model = \n")
    r = cli("install", "host", "codex")
    assert r.returncode == 2 and f"{toml}: not valid TOML" in r.stderr and r.stderr.count("\n") == 1


def test_an_unknown_host_is_one_line(cli):
    r = cli("install", "host", "vim")
    assert r.returncode == 2 and r.stderr == "pilothouse: unknown host 'vim'; use one of claude, codex, opencode\n"


@pytest.mark.realcli
@pytest.mark.parametrize("host,runner", [("claude", "claude-code"), ("codex", "codex"), ("opencode", "opencode")])
def test_the_real_host_reads_the_config_install_host_wrote(cli, isolated_home, tmp_path, host, runner):
    from test_runner_common import require_cli

    binary = require_cli(runner)
    ok(cli("install", "host", host))
    r = subprocess.run([str(binary), "mcp", "list"], cwd=tmp_path, capture_output=True, text=True, timeout=guard(120),
                       stdin=subprocess.DEVNULL)
    listed = r.stdout + r.stderr
    assert r.returncode == 0, listed
    assert "pilothouse" in listed and "mcp" in listed
    if host != "codex":  # claude and opencode start the server and say it answered
        assert "onnected" in listed, listed
