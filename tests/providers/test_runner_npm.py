"""Finding, versioning and installing the npm-installed agent CLIs: one real install from the npm
registry into the test's own prefix (slow), the failures with npm absent or failing the way npm fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import guard


def fake_cli(prefix: Path, name: str, version: str, counter: Path | None = None) -> Path:
    b = prefix / "node_modules" / ".bin" / name
    b.parent.mkdir(parents=True, exist_ok=True)
    count = f'echo x >> "{counter}"\n' if counter else ""
    b.write_text(f"#!/bin/sh\n{count}echo '{name} {version}'\n")
    b.chmod(0o755)
    return b


def test_pins_name_the_three_clis():
    from pilothouse.providers.runners.pins import PINS, npm_specs

    assert npm_specs() == ["opencode-ai@1.18.33", "@anthropic-ai/claude-code@2.1.197", "@openai/codex@0.171.0"]
    assert {p.binary for p in PINS.values()} == {"opencode", "claude", "codex"}


def test_lookup_order_user_prefix_then_test_prefix_then_path(tmp_path, monkeypatch):
    from pilothouse.providers import paths
    from pilothouse.providers.runners.npm import find_binary

    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "claude").write_text("#!/bin/sh\n")
    (on_path / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    monkeypatch.delenv("PILOTHOUSE_TEST_RUNNERS", raising=False)
    assert find_binary("claude-code") == on_path / "claude"
    test_prefix = tmp_path / "test-runners"
    fake_cli(test_prefix, "claude", "2.1.197")
    monkeypatch.setenv("PILOTHOUSE_TEST_RUNNERS", str(test_prefix))
    assert find_binary("claude-code") == test_prefix / "node_modules" / ".bin" / "claude"
    fake_cli(paths.runners_dir(), "claude", "2.1.197")
    assert find_binary("claude-code") == paths.runners_dir() / "node_modules" / ".bin" / "claude"


def test_version_is_cached_by_mtime_and_size(tmp_path):
    from pilothouse.providers.runners.npm import version_of

    counter = tmp_path / "calls"
    b = fake_cli(tmp_path / "p", "codex", "0.171.0", counter)
    assert version_of(b) == "0.171.0"
    assert version_of(b) == "0.171.0"
    assert counter.read_text().count("x") == 1  # the second call never spawned the binary
    b.write_text(b.read_text().replace("0.171.0", "0.172.10"))
    assert version_of(b) == "0.172.10"
    assert counter.read_text().count("x") == 2


def test_version_comes_from_package_json_without_spawning(tmp_path):
    from pilothouse.providers.runners.npm import version_of

    pkg = tmp_path / "node_modules" / "opencode-ai"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "opencode-ai", "version": "1.18.33"}')
    exe = pkg / "bin" / "opencode"
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    assert version_of(exe) == "1.18.33"


def test_missing_npm_is_one_clear_line(cli, tmp_path):
    r = cli("install", "runner", "codex", env={"PATH": str(tmp_path)})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "pilothouse: npm is not installed; install Node.js 20 or newer with npm (Debian/Ubuntu: "
        "`apt-get install nodejs npm`) and run the command again"]


def test_failed_install_is_one_line_naming_the_package(cli, tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    npm = fake_bin / "npm"
    npm.write_text("#!/bin/sh\necho 'npm error code E404' >&2\n"
                   "echo \"npm error 404 Not Found - GET https://registry.example/@openai%2fcodex\" >&2\nexit 1\n")
    npm.chmod(0o755)
    r = cli("install", "runner", "codex", env={"PATH": f"{fake_bin}:{os.environ['PATH']}"})
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pilothouse: npm install @openai/codex@0.171.0 failed: ")
    assert "404" in lines[0]


def test_uninstall_of_a_runner_never_installed_changes_nothing(cli):
    r = cli("uninstall", "runner", "opencode")
    assert r.returncode == 0 and "nothing to change" in r.stdout


@pytest.mark.parametrize("runner", ["opencode", "claude-code", "codex"])
def test_runners_report_not_installed_without_a_binary(runner, monkeypatch, tmp_path):
    from pilothouse.providers.runners import get_runner

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PILOTHOUSE_TEST_RUNNERS", raising=False)
    r = get_runner(runner)
    assert r.installed() is False and r.version() is None


@pytest.mark.slow
def test_install_runner_puts_the_pinned_cli_in_the_users_prefix_and_uninstall_removes_it(cli, isolated_home):
    """The real npm, the real registry: into PILOTHOUSE_HOME and the HOME conftest made for this test,
    so npm's cache and config land there and never in the real home."""
    import json
    import subprocess

    from pilothouse.providers import paths
    from pilothouse.providers.runners.npm import find_binary, installed_records
    from pilothouse.providers.runners.pins import pin

    p = pin("claude-code")
    prefix = paths.runners_dir()
    assert prefix.is_relative_to(isolated_home.parent) and not prefix.exists()
    binary = prefix / "node_modules" / ".bin" / p.binary
    # no other prefix can answer for it: only the install makes it findable
    env = {"PILOTHOUSE_TEST_RUNNERS": str(isolated_home / "no-runners")}
    r = cli("install", "runner", "claude-code", "--json", timeout=900, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "changed": [f"installed claude-code {p.version} (@anthropic-ai/claude-code) at {binary}"]}
    assert (isolated_home / ".npm").is_dir()  # npm's cache went to the test's HOME
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=guard(60),
                             env={"PATH": os.environ["PATH"], "HOME": str(isolated_home)})
    assert version.returncode == 0 and version.stdout.split()[0] == p.version, version.stdout + version.stderr
    record = installed_records()["claude-code"]
    assert (record["package"], record["version"], record["binary"]) == (p.package, p.version, str(binary))
    assert find_binary("claude-code") == binary

    r = cli("uninstall", "runner", "claude-code", env=env)
    assert (r.returncode, r.stdout) == (0, "removed claude-code\n"), r.stderr
    assert not binary.exists() and not (prefix / "node_modules" / p.package).exists()
    assert "claude-code" not in installed_records()
    r = cli("uninstall", "runner", "claude-code", env=env)
    assert (r.returncode, r.stdout) == (0, "nothing to change\n")
