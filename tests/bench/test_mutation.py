"""bench/mutation.py: a mutant is what pilothouse's own isolated children import, and the report
tells kills by test, survivors and timeouts apart."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def _mutation() -> Any:
    spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "bench" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_an_isolated_grandchild_imports_the_mutated_copy_and_writes_no_byte_code(tmp_path: Path) -> None:
    mutation = _mutation()
    tree = tmp_path / "tree"
    mutation._copy_tree(tree)
    python = mutation._install(tmp_path / "venv", tree)
    guard = tree / "providers" / "guard.py"
    guard.write_text(guard.read_text() + "\nMUTANT = 'the copy'\n")
    # as a supervisor starts a dispatch: `python -I` (PYTHONPATH ignored), twice over
    child = ("from pilothouse.providers.hostpython import python_argv; import subprocess; "
             "subprocess.run(python_argv('-c', 'from pilothouse.providers import guard; print(guard.MUTANT)'), "
             "check=True)")
    env = {**mutation._env(tmp_path / "venv"), "PYTHONPATH": str(ROOT.parent)}  # a stray one changes nothing
    out = subprocess.run([str(python), "-I", "-c", child], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "the copy"
    assert not list(tree.rglob("__pycache__")), "a child wrote byte code of a mutant"
    # an install that still points at the copy is kept
    assert mutation._install(tmp_path / "venv", tree) == python
    assert (tmp_path / "venv" / "bin" / "python").exists()
    assert "PYTHONPATH" not in mutation._env(tmp_path / "venv")


def test_a_kill_is_put_down_to_the_first_test_that_failed() -> None:
    mutation = _mutation()
    output = ("F\n=== FAILURES ===\n...\n=========================== short test summary info "
              "============================\nFAILED tests/core/test_seal.py::test_any_changed_or_missing_byte_is_refused"
              " - AssertionError: x\n!!!!!!! stopping after 1 failures !!!!!!!\n1 failed, 1 passed in 2.1s\n")
    assert mutation.killed_by(output) == "test_seal.py::test_any_changed_or_missing_byte_is_refused"
    assert mutation.killed_by("ERROR tests/core/test_seal.py - ImportError\n") == "test_seal.py"
    # a parametrized test counts once, whatever its parameters hold (spaces too)
    assert mutation.killed_by("FAILED tests/providers/test_guard.py::test_refused[use sk-x to call-sk-x] - E\n") \
        == "test_guard.py::test_refused"
    assert mutation.killed_by("Traceback (most recent call last):\n") == "(no test named: the test command failed)"
    assert mutation.killed_by(None) == "(no test named: the test command failed)"
