"""A version manager's shims on PATH under $HOME (pyenv, asdf, rbenv…) keep working inside the
sandbox, while private dot-directories stay hidden."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pilothouse.providers import confine
from support import guard


def test_shims_under_home_run_confined_and_private_dirs_stay_hidden(tmp_path: Path, isolated_home: Path) -> None:
    root = isolated_home / ".faketool"
    (root / "shims").mkdir(parents=True)
    (root / "libexec").mkdir()
    # like ~/.pyenv/shims/python: a shim that execs the manager's own program elsewhere in its root
    (root / "libexec" / "faketool").write_text("#!/bin/sh\necho tool-ran\n")
    (root / "shims" / "tool").write_text(f"#!/bin/sh\nexec {root}/libexec/faketool \"$@\"\n")
    for p in (root / "libexec" / "faketool", root / "shims" / "tool"):
        p.chmod(0o755)
    (isolated_home / ".ssh" / "bin").mkdir(parents=True)
    (isolated_home / ".ssh" / "id_ed25519").write_text("private")

    workdir = tmp_path / "wt"
    workdir.mkdir()
    # a PATH entry inside a private dot-directory does not bring that directory back
    env = {"PATH": os.pathsep.join([str(root / "shims"), str(isolated_home / ".ssh" / "bin"), "/usr/bin", "/bin"])}
    script = f"tool; cat {isolated_home}/.ssh/id_ed25519 && echo LEAKED; touch {root}/written && echo WROTE; true"
    launch = confine.prepare_command(["/bin/sh", "-c", script], env, workdir, tmp_path / "scratch")
    assert "bwrap" in os.path.basename(launch.argv[0])
    out = subprocess.run(launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=guard(60))
    assert "tool-ran" in out.stdout, out.stderr
    assert "LEAKED" not in out.stdout
    assert "WROTE" not in out.stdout  # the tool root is bound read-only
    assert not (root / "written").exists()


def test_a_rustup_cargo_in_the_home_finds_its_toolchains_in_a_gate(tmp_path: Path, isolated_home: Path,
                                                                   monkeypatch) -> None:
    """~/.cargo/bin/cargo is rustup's proxy: a gate gets ~/.rustup read-only and RUSTUP_HOME naming
    it (its own HOME has none), and a CARGO_HOME of its own to write its cache in."""
    (isolated_home / ".cargo" / "bin").mkdir(parents=True)
    (isolated_home / ".rustup" / "toolchains").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(isolated_home))
    path = f"{isolated_home}/.cargo/bin{os.pathsep}{os.environ.get('PATH', '/usr/bin')}"
    env = {"HOME": str(isolated_home), "PATH": path}
    launch = confine.prepare_command(["/bin/true"], env, tmp_path)
    assert launch.env["RUSTUP_HOME"] == str(isolated_home / ".rustup")
    assert launch.env["CARGO_HOME"].endswith("/home/.cargo") and not launch.env["CARGO_HOME"].startswith(
        str(isolated_home))
    rustup = str(os.path.realpath(isolated_home / ".rustup"))
    assert any(a == "--ro-bind" and b == rustup for a, b in zip(launch.argv, launch.argv[1:], strict=False)), \
        launch.argv
    # the operator's own RUSTUP_HOME wins
    launch = confine.prepare_command(["/bin/true"], {**env, "RUSTUP_HOME": "/opt/rustup"}, tmp_path)
    assert launch.env["RUSTUP_HOME"] == "/opt/rustup"


def test_a_path_entry_in_a_plain_folder_of_the_home_brings_back_only_that_entry(tmp_path: Path,
                                                                                isolated_home: Path) -> None:
    """Only a version manager's dot-directory is bound whole: ~/work/tool/bin on PATH shows that folder,
    not ~/work with every other checkout and file in it."""
    tool = isolated_home / "work" / "tool" / "bin"
    tool.mkdir(parents=True)
    (tool / "tool").write_text("#!/bin/sh\necho tool-ran\n")
    (tool / "tool").chmod(0o755)
    other = isolated_home / "work" / "client-repo"
    other.mkdir()
    (other / "secrets.env").write_text("DB_PASSWORD=operators-own\n")
    workdir = tmp_path / "wt"
    workdir.mkdir()
    env = {"PATH": os.pathsep.join([str(tool), "/usr/bin", "/bin"])}
    script = f"tool; cat {other}/secrets.env && echo LEAKED; ls {isolated_home}/work; true"
    launch = confine.prepare_command(["/bin/sh", "-c", script], env, workdir, tmp_path / "scratch")
    out = subprocess.run(launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=guard(60))
    assert "tool-ran" in out.stdout, out.stderr
    assert "LEAKED" not in out.stdout and "operators-own" not in out.stdout
    assert "client-repo" not in out.stdout, out.stdout
    binds = {b for a, b in zip(launch.argv, launch.argv[1:], strict=False) if a == "--ro-bind"}
    assert str(os.path.realpath(isolated_home / "work")) not in binds, binds
