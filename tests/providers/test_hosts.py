"""`pilothouse install/uninstall … on claude|codex`: one playbook skill per host, from its own config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def skill(home: Path, host: str) -> Path:
    return home / (".claude" if host == "claude" else ".codex") / "skills" / "pilothouse" / "SKILL.md"


def ok(r) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_install_on_claude_writes_one_skill_with_only_that_hosts_workers(cli, isolated_home):
    ok(cli("install", "sim-claude", "on", "claude"))
    ok(cli("install", "sim-codex", "on", "codex"))
    text = skill(isolated_home, "claude").read_text()
    assert text.startswith("---\nname: pilothouse\n")
    assert "| sim-claude |" in text and "sim-codex" not in text
    assert "{{WORKERS}}" not in text
    codex_text = skill(isolated_home, "codex").read_text()
    assert "| sim-codex |" in codex_text and "sim-claude" not in codex_text
    listed = sorted(p.relative_to(isolated_home / ".claude") for p in (isolated_home / ".claude").rglob("*"))
    assert listed == [Path("skills"), Path("skills/pilothouse"), Path("skills/pilothouse/SKILL.md")]


def test_install_is_idempotent_and_refresh_changes_nothing(cli, isolated_home):
    ok(cli("install", "sim-claude", "on", "claude"))
    path = skill(isolated_home, "claude")
    before = (path.read_text(), path.stat().st_mtime_ns)
    assert "nothing to change" in ok(cli("install", "sim-claude", "on", "claude"))
    assert "nothing to change" in ok(cli("install", "claude"))
    assert (path.read_text(), path.stat().st_mtime_ns) == before
    data = json.loads((Path(os.environ["PILOTHOUSE_HOME"]) / "config" / "hosts.json").read_text())
    assert data["claude"]["providers"] == ["sim-claude"]


def test_mode_routes_show_in_the_table_and_can_be_removed(cli, isolated_home):
    ok(cli("install", "sim-claude", "on", "claude", "for", "review"))
    ok(cli("install", "sim-opencode", "on", "claude", "for", "code"))
    text = skill(isolated_home, "claude").read_text()
    assert "code → `--provider sim-opencode`" in text and "review → `--provider sim-claude`" in text
    ok(cli("uninstall", "for", "code", "on", "claude"))
    text = skill(isolated_home, "claude").read_text()
    assert "code →" not in text and "| sim-opencode |" in text


def test_removing_the_last_provider_removes_the_skill_and_nothing_else(cli, isolated_home):
    codex_home = isolated_home / "codex-home"
    (codex_home / "skills" / "mine").mkdir(parents=True)
    (codex_home / "config.toml").write_text("model = 'x'\n")
    env = {"CODEX_HOME": str(codex_home)}
    ok(cli("install", "sim-codex", "on", "codex", env=env))
    assert (codex_home / "skills" / "pilothouse" / "SKILL.md").is_file()
    ok(cli("install", "sim-claude", "on", "codex", env=env))
    ok(cli("uninstall", "sim-codex", "on", "codex", env=env))
    assert "sim-codex" not in (codex_home / "skills" / "pilothouse" / "SKILL.md").read_text()
    ok(cli("uninstall", "sim-claude", "on", "codex", env=env))
    assert not (codex_home / "skills" / "pilothouse").exists()
    assert (codex_home / "skills" / "mine").is_dir() and (codex_home / "config.toml").read_text() == "model = 'x'\n"
    assert not (isolated_home / ".codex").exists()


def test_uninstall_host_and_all_remove_created_dirs(cli, isolated_home):
    ok(cli("install", "sim-claude", "on", "claude"))
    ok(cli("install", "sim-claude", "on", "codex"))
    ok(cli("uninstall", "claude"))
    assert not (isolated_home / ".claude").exists()
    assert skill(isolated_home, "codex").exists()
    ok(cli("uninstall", "all"))
    assert not (isolated_home / ".codex").exists()
    assert "nothing to change" in ok(cli("install", "all"))  # no provider: no skill deployed


def test_global_key_is_stored_and_never_printed(cli, isolated_home):
    key = "sk-hosts-canary-0123456789"
    r = cli("install", "sim-claude", "on", "claude", "--global-key", "--backend", "file", input=key + "\n")
    assert key not in ok(r) and key not in r.stderr
    assert "stored the key of sim-claude" in r.stdout
    # sim-claude needs no key (data/providers/sim-claude.yaml): the stored one does not change its row
    row = next(x for x in skill(isolated_home, "claude").read_text().splitlines() if x.startswith("| sim-claude |"))
    assert row.endswith("| not needed |"), row
    assert key not in skill(isolated_home, "claude").read_text()
    assert "removed the key of sim-claude" in ok(cli("uninstall", "key", "sim-claude"))


def test_a_provider_without_key_is_flagged_in_the_table(cli, isolated_home):
    r = cli("install", "glm", "on", "claude")
    assert "has no API key yet" in ok(r) + r.stderr
    assert "MISSING: `pilothouse key set glm`" in skill(isolated_home, "claude").read_text()


@pytest.mark.parametrize("words", [
    ["install", "sim-claude", "on", "vim"],
    ["install", "nope", "on", "claude"],
    ["install", "sim-claude", "on", "claude", "for", "dance"],
    ["install", "sim-claude", "claude"],
    ["uninstall", "for", "code", "on", "claude"],
    ["uninstall", "sim-claude", "on", "claude"],
    ["uninstall", "runner", "nope"],
])
def test_mistakes_are_one_line_and_exit_2(cli, words):
    r = cli(*words)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pilothouse:") and "Traceback" not in r.stderr
