"""`init` and `check --gates` run each gate once on the base commit, confined, before any worker
is spent: pass or fail, counts, time and what ran; a gate that cannot serve is named with the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pilothouse.core.git.worktrees import worktree_root
from pilothouse.core.records.layout import find_repo


def _commit(repo: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "settings"], cwd=repo, check=True)


def test_init_proves_a_pytest_gate_on_the_base_with_its_counts_and_interpreter(git_repo: Path, cli) -> None:
    gate = f"{sys.executable} -m pytest -q tests"
    r = cli("init", "--gate-fast", gate, "--gate-full", gate, cwd=git_repo)
    assert r.returncode == 0, r.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=git_repo, capture_output=True, text=True).stdout
    proved = next(line for line in r.stdout.splitlines() if line.startswith("  gate fast/full"))
    assert f"passed on {head[:10]} — 1 tests: 1 passed, 0 failed, 0 skipped (junit) in " in proved and f"ran {sys.executable}" in proved
    # the throwaway worktree is gone, and so is its registration
    assert not any((worktree_root(find_repo(git_repo)) / "_prove").iterdir())
    listed = subprocess.run(["git", "worktree", "list"], cwd=git_repo, capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1, listed
    j = cli("check", "--gates", "--json", cwd=git_repo)
    data = json.loads(j.stdout)
    assert j.returncode == 0 and data["ok"] and data["proofs"][0]["counts"]["passed"] == 1


def test_check_names_a_gate_whose_command_does_not_exist_and_one_that_fails_on_the_base(git_repo: Path,
                                                                                        cli) -> None:
    r = cli("init", "--no-prove", "--gate-fast", "no-such-runner -q", "--gate-full", "false", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    _commit(git_repo)
    quick = cli("check", cwd=git_repo)
    assert quick.returncode == 0 and "gates not run: `pilothouse check --gates`" in quick.stdout
    c = cli("check", "--gates", cwd=git_repo)
    assert c.returncode == 2, (c.stdout, c.stderr)
    errors = c.stderr.splitlines()
    assert any("gate 'fast': command not found: no-such-runner" in e and "gates.fast in .ai/project.yaml" in e
               for e in errors), c.stderr
    assert any("gate full (false) fails on the base commit" in e and "every task would fail it" in e
               and "gates.full" in e for e in errors), c.stderr
    assert "settings fit" not in c.stdout


def test_a_gate_that_runs_no_tests_is_named_and_one_without_counts_says_the_checks_are_off(git_repo: Path,
                                                                                          cli) -> None:
    (git_repo / "empty").mkdir()
    (git_repo / "empty" / "test_nothing.py").write_text("# no tests yet\n")
    _commit(git_repo)
    none = f"{sys.executable} -m pytest -q empty || test $? = 5"  # pytest's 'no tests collected', made 0
    r = cli("init", "--gate-fast", none, "--gate-full", "true", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert any(line.startswith("warning: gate fast (") and "runs no tests on the base commit" in line
               for line in r.stdout.splitlines()), r.stdout
    assert "note: gate full printed no test counts pilothouse can read: the weakened-test checks" in r.stdout
