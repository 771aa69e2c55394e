"""Attack 6: a worker's branch plants a `pilothouse/` package in the repository. The host agent starts
the MCP server pilothouse registered with it in that repository; plain `python -m pilothouse` there
would import the planted package as the operator. The registered command (the console script by
its absolute path, or `python -I -m` where there is none) and every command pilothouse starts
itself never run it, and `pilothouse probe` checks both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.providers.hostpython import host_env, python_argv
from support import guard


def plant(repo: Path, marker: Path) -> None:
    package = repo / "pilothouse"
    package.mkdir(parents=True)
    for name in ("__init__.py", "__main__.py"):
        (package / name).write_text(f"open({str(marker)!r}, 'a').write('ran as the operator\\n')\n")


def start_as_the_host_does(argv: list[str], repo: Path) -> subprocess.CompletedProcess[str]:
    """The host agent starts its MCP server in the repository, stdin its pipe: closed at once here,
    the server ends."""
    return subprocess.run(argv, cwd=repo, env=host_env(), capture_output=True, text=True, timeout=guard(120),
                          stdin=subprocess.DEVNULL)


def registered_command(cli, home: Path) -> list[str]:
    r = cli("install", "host", "claude")
    assert r.returncode == 0, r.stderr
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["pilothouse"]
    return [entry["command"], *entry["args"]]


def test_plain_python_m_in_a_planted_tree_would_run_the_package(tmp_path: Path) -> None:
    # what the attack relied on: this is why nothing pilothouse starts runs it that way
    marker = tmp_path / "marker"
    plant(tmp_path / "repo", marker)
    start_as_the_host_does([sys.executable, "-m", "pilothouse", "--version"], tmp_path / "repo")
    assert marker.exists()


def test_the_registered_mcp_server_never_runs_a_planted_package(cli, isolated_home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    repo = tmp_path / "repo"
    plant(repo, marker)
    argv = registered_command(cli, isolated_home)
    assert Path(argv[0]).is_absolute() and argv[-1] == "mcp"
    assert argv[1:] == ["mcp"] or argv[1] == "-I", argv
    done = start_as_the_host_does(argv, repo)
    assert not marker.exists(), done.stderr
    assert "ran as the operator" not in done.stdout + done.stderr


def test_without_a_console_script_the_registration_is_python_isolated(tmp_path: Path) -> None:
    # a Python with no `pilothouse` script beside it: this venv's, seen from another folder
    venv = Path(sys.prefix)
    clone = tmp_path / "venv"
    (clone / "bin").mkdir(parents=True)
    (clone / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (clone / "lib").symlink_to(venv / "lib")
    os.symlink(sys.executable, clone / "bin" / "python")
    said = subprocess.run([str(clone / "bin" / "python"), "-I", "-c",
                           "import json; from pilothouse.providers.mcp_hosts import server_command; "
                           "print(json.dumps(server_command()))"], capture_output=True, text=True, timeout=guard(120))
    assert said.returncode == 0, said.stderr
    argv = json.loads(said.stdout)
    assert argv == [str(clone / "bin" / "python"), "-I", "-m", "pilothouse", "mcp"]
    marker = tmp_path / "marker"
    plant(tmp_path / "repo", marker)
    done = start_as_the_host_does([*argv[:-1], "--version"], tmp_path / "repo")
    assert done.returncode == 0 and done.stdout.startswith("pilothouse "), done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("command", [("dispatch", "--help"), ("mcp", "--help"), ("view", "--help")])
def test_what_pilothouse_starts_itself_never_runs_a_planted_package(tmp_path: Path, command) -> None:
    marker = tmp_path / "marker"
    plant(tmp_path / "repo", marker)
    done = start_as_the_host_does(python_argv("-m", "pilothouse", *command), tmp_path / "repo")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_probe_checks_a_planted_package(tmp_path: Path) -> None:
    from pilothouse.providers.confine.probe_reads import package_check

    own = tmp_path / "own"
    own.mkdir()
    result = package_check(own, "t")
    assert result["pass"] and not result["reached_host"], result
    assert not (own / "pilothouse").exists()  # the probe leaves nothing behind
