"""`sandbox.share`: the checkout's own venv and node_modules, read-only in a task's sandbox, with
the code under test the worktree's (an editable install into a src layout proves it), and no link of
the checkout's letting a sandbox out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pilothouse.core.git.gates import run_command
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers import paths

PYPROJECT = """[build-system]
requires = ["setuptools>=64", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "where"
version = "0.1"

[project.scripts]
where = "where:main"
"""
MODULE = 'WHERE = "{}"\n\n\ndef main():\n    print("where:", WHERE)\n'


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def editable_repo() -> Iterator[Path]:
    """A src-layout project outside /tmp and $HOME (both hidden in every sandbox), its `.venv`
    holding an editable install of it (`pip install -e .`: a .pth naming the checkout's src)."""
    base = Path(tempfile.mkdtemp(prefix="ph-share-", dir="/var/tmp"))
    main = base / "repo"
    (main / "src" / "where").mkdir(parents=True)
    (main / "pyproject.toml").write_text(PYPROJECT)
    (main / "src" / "where" / "__init__.py").write_text(MODULE.format("main checkout"))
    (main / ".gitignore").write_text(".venv/\nnode_modules/\n.env\n")
    env = {**os.environ, "HOME": str(base), "PIP_CACHE_DIR": str(base / "pip-cache"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(main / ".venv")], check=True, env=env)
    subprocess.run([str(main / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "-e", str(main)], check=True, env=env, cwd=main)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=main, check=True)
    subprocess.run(["git", "add", "-A"], cwd=main, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "initial"], cwd=main, check=True, env=env)
    try:
        yield main
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _worktree(main: Path, name: str) -> Path:
    wt = paths.data_dir() / "worktrees" / name
    wt.parent.mkdir(parents=True, exist_ok=True)
    _git(main, "worktree", "add", "-q", "-b", name, str(wt))
    return wt


def _gate(cmd: str, wt: Path, share: list[str]) -> str:
    res = run_command(cmd, wt, settings={"confinement": "on", "sandbox_share": share})
    return res.output_tail if res.passed else f"failed: {res.reason} {res.output_tail}"


def test_a_shared_venv_runs_the_worktrees_code_through_the_checkouts_editable_install(
        editable_repo: Path) -> None:
    main = editable_repo
    wt = _worktree(main, "edit-where")
    (wt / "src" / "where" / "__init__.py").write_text(MODULE.format("task worktree"))
    imports = "import where; print(where.WHERE, where.__file__)"

    # without the setting the venv is not there: the worktree holds only what git tracks
    assert "failed" in _gate(f".venv/bin/python -c '{imports}'", wt, [])
    for python in (".venv/bin/python", f"{main}/.venv/bin/python"):
        out = _gate(f"{python} -c '{imports}'", wt, [".venv"])
        assert out.startswith("task worktree"), out
        assert "main checkout" not in out
    # and the gate says which interpreter it ran
    res = run_command(f".venv/bin/python -c '{imports}'", wt, settings={"confinement": "on", "sandbox_share": [".venv"]})
    assert res.toolchain is not None and res.toolchain.startswith(f"{main}/.venv/bin/python (venv of Python")
    assert f"(venv of Python {sys.version_info.major}.{sys.version_info.minor}" in res.toolchain
    assert res.toolchain.endswith(", shared from the main checkout)")
    # a console script's shebang names the checkout's interpreter: it runs, on the worktree's code
    assert _gate(".venv/bin/where", wt, [".venv"]).strip() == "where: task worktree"
    # read-only: a gate cannot change the operator's environment
    out = _gate("touch .venv/planted", wt, [".venv"])
    assert out.startswith("failed") and "Read-only" in out
    assert not (main / ".venv" / "planted").exists()


def test_the_checkouts_own_links_in_a_shared_folder_lead_nowhere_outside_the_sandbox(
        editable_repo: Path, isolated_home: Path) -> None:
    main = editable_repo
    secret = "OPERATOR_TOKEN=hunter2-5c1e"
    (main / ".env").write_text(secret + "\n")  # untracked: the operator's
    (isolated_home / "notes.txt").write_text(secret + "\n")
    modules = main / "node_modules"
    modules.mkdir(exist_ok=True)
    for name, target in (("leak-env", "../.env"), ("leak-abs", str(main / ".env")),
                         ("leak-home", str(isolated_home / "notes.txt")), ("leak-root", "/")):
        (modules / name).unlink(missing_ok=True)
        (modules / name).symlink_to(target)
    wt = _worktree(main, "links")
    cmd = ("for f in node_modules/leak-env node_modules/leak-abs node_modules/leak-home "
           f"{main}/.env {main}/node_modules/leak-env; do cat $f; done; "
           f"ls node_modules/leak-root{isolated_home}; ls node_modules; echo done")
    out = _gate(cmd, wt, ["node_modules"])
    assert "hunter2" not in out and "done" in out, out
    assert "leak-env" in out  # the folder is there; what its links name is not
    # a shared entry that is itself a link out of the checkout is refused, in one line
    (main / "vendor").symlink_to(isolated_home)
    try:
        out = _gate("ls vendor", wt, ["vendor"])
        assert "sandbox.share in .ai/project.yaml: vendor leads out of" in out and "notes" not in out
    finally:
        (main / "vendor").unlink()
    # and a worker's own link where the shared folder goes does not redirect the bind
    wt2 = _worktree(main, "planted")
    (wt2 / "node_modules").symlink_to(wt2 / "src")
    out = _gate("ls src; ls node_modules/", wt2, ["node_modules"])
    assert "leak-env" not in out and "where" in out


def test_sandbox_share_names_folders_inside_the_repository() -> None:
    ok = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"},
                                       "sandbox": {"share": [".venv/", "node_modules"]}})
    assert ok.sandbox.share == [".venv", "node_modules"]
    for bad in ("/opt/venv", "../other/.venv", "~/.venv", " "):
        with pytest.raises(ValueError, match="sandbox.share"):
            ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}, "sandbox": {"share": [bad]}})
