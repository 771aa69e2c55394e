"""Which interpreter a gate ran, named before it runs: a venv by its Python, and a worker's venv
read without following its links."""

from __future__ import annotations

import os
from pathlib import Path

from pilothouse.core.git.toolchain import describe


def test_a_venv_is_named_by_its_python_and_a_workers_link_is_not_followed(tmp_path: Path) -> None:
    tree = tmp_path / "worktree"
    (tree / "v" / "bin").mkdir(parents=True)
    (tree / "v" / "bin" / "python").write_text("#!/bin/sh\n")
    (tree / "v" / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.12.3\n")
    env = {"PATH": os.environ.get("PATH", "")}
    assert describe("v/bin/python -m pytest", tree, env) == f"{tree}/v/bin/python (venv of Python 3.12.3 at /usr/bin)"
    secret = tmp_path / "operator.cfg"  # outside the worktree: the worker's link must not reach it
    secret.write_text("version = hunter2-7d1\n")
    (tree / "v" / "pyvenv.cfg").unlink()
    (tree / "v" / "pyvenv.cfg").symlink_to(secret)
    out = describe("v/bin/python -m pytest", tree, env)
    assert out is not None and "hunter2" not in out
    assert describe("cd x && make", tree, env) is None  # a shell construct: its programs come from PATH
    assert describe("nosuch-tool --check", tree, env) == "nosuch-tool (not found)"
