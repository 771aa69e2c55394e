"""A dispatch says what it does: a write into the operator's own checkout needs --in-place (or a
yes on a terminal) and suggests a worktree; the simulator's default answer cites a file of the
repository it runs on; a scripted worker that ran out of turns says "script finished"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

NO_RESULT = """name: unfinished
description: a code script whose last turn gives no result block
scripts:
  - match: {mode: code}
    turns:
      - say: "Working on it."
        actions:
          - read: {path: README.md}
"""


def _verdict(r: subprocess.CompletedProcess[str]) -> dict:
    out = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and len(out) == 2, (r.stdout, r.stderr)
    return out[1]


def _task(tmp_path: Path, text: str) -> str:
    (tmp_path / "task.md").write_text(text)
    return str(tmp_path / "task.md")


def test_a_code_dispatch_into_a_checkout_set_up_for_pilothouse_needs_in_place(git_repo: Path, tmp_path: Path,
                                                                              cli) -> None:
    assert cli("init", "--no-prove", "--gate-fast", "true", cwd=git_repo).returncode == 0
    scen = tmp_path / "unfinished.yaml"
    scen.write_text(NO_RESULT)
    argv = ["dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--scenario", str(scen),
            "--task-file", _task(tmp_path, "Rename add.\n")]
    refused = cli(*argv)
    assert refused.returncode != 0 and "--in-place" in refused.stderr and "worktree add" in refused.stderr
    assert "Traceback" not in refused.stderr
    v = _verdict(cli(*argv, "--in-place"))
    # the scripted worker ran out of turns: the script is at fault, not the server
    assert v["verdict"] != "completed" and v["reason"].startswith("script finished:"), v["reason"]
    assert "dropped `tools`" not in v["reason"]
    # a linked worktree is the place for it: no question, no note
    wt = tmp_path / "try"
    subprocess.run(["git", "-C", str(git_repo), "worktree", "add", "-q", "-b", "try", str(wt)], check=True)
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(wt), "--scenario", str(scen),
            "--task-file", _task(tmp_path, "Rename add.\n"))
    _verdict(r)
    assert "note:" not in r.stderr


def test_a_code_dispatch_into_any_other_checkout_says_where_it_writes(git_repo: Path, tmp_path: Path, cli) -> None:
    scen = tmp_path / "unfinished.yaml"
    scen.write_text(NO_RESULT)
    r = cli("dispatch", "--provider", "sim", "--mode", "code", "--workdir", str(git_repo), "--scenario", str(scen),
            "--task-file", _task(tmp_path, "Rename add.\n"))
    _verdict(r)
    assert f"note: code dispatch writes into {git_repo.resolve()} itself, not a worktree" in r.stderr


def test_the_default_explore_answer_cites_a_file_of_the_repository_it_runs_on(tmp_path: Path, cli) -> None:
    repo = tmp_path / "lib"
    repo.mkdir()
    (repo / "README.md").write_text("\n# lib: parses things\n\nMore.\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    r = cli("dispatch", "--provider", "sim", "--mode", "explore", "--workdir", str(repo),
            "--task-file", _task(tmp_path, "What is this?\n"))
    v = _verdict(r)
    assert v["verdict"] == "completed", v
    assert v["result"]["facts"] == [{"fact": "README.md begins with: # lib: parses things", "file_line": "README.md:2"}]
