"""Which program a gate command starts, found before it runs: whether it is installed at all, and
which interpreter or toolchain it is (each gate run says so: a `python` first on PATH, the repo's
venv or pilothouse's own, pass or fail different numbers of tests).

Read on the host without running anything: a path in a shared folder (`sandbox.share`) is looked
up in the main checkout, where the sandbox's bind comes from; a venv's interpreter is named with
the Python its `pyvenv.cfg` records.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from pilothouse.providers import confine

_SHELL_WORDS = {"cd", "export", "set", "source", ".", "exec", "test", "[", "[[", "true", "false", "echo", "if",
                "for", "while", "until", "case", "select", "function", "coproc", ":", "env", "command",
                "builtin", "eval", "{", "(", "!", "time", "ulimit", "umask"}


def first_program(command: str) -> str | None:
    """The program a gate command starts, or None when it is a shell construct we can't judge."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for w in words:
        if "=" in w and not w.startswith(("=", "/", ".")) and w.split("=", 1)[0].isidentifier():
            continue  # VAR=value prefix
        return None if w in _SHELL_WORDS else w
    return None


def _share(settings: dict[str, Any] | None) -> list[str]:
    return [str(s) for s in (settings or {}).get("sandbox_share") or []]


def _located(prog: str, cwd: Path, env: dict[str, str], settings: dict[str, Any] | None) -> Path | None:
    if "/" in prog:
        candidate = confine.host_path(cwd, Path(prog), _share(settings)) if not os.path.isabs(prog) else Path(prog)
        return candidate if os.path.lexists(candidate) else None
    found = shutil.which(prog, path=env.get("PATH"))
    return Path(found) if found else None


def missing_program(command: str, cwd: Path, env: dict[str, str],
                    settings: dict[str, Any] | None = None) -> str | None:
    prog = first_program(command)
    if prog is None:
        return None
    return None if _located(prog, cwd, env, settings) is not None else prog


def _venv_python(exe: Path, cwd: Path) -> str | None:
    """'Python X.Y.Z at HOME' from the pyvenv.cfg beside a venv's bin/, or None (not a venv).

    A venv inside the worktree is the worker's: its pyvenv.cfg is read without following a link."""
    from pilothouse.providers.workerfs import read_in_tree

    cfg = exe.parent.parent / "pyvenv.cfg"
    tree = Path(os.path.realpath(cwd))
    try:
        if cfg.is_relative_to(tree) or cfg.is_relative_to(cwd):
            base = tree if cfg.is_relative_to(tree) else cwd
            entry = read_in_tree(base, str(cfg.relative_to(base)), 8192)
            if entry.kind != "file":
                return None
            text = entry.data.decode("utf-8", errors="replace")
        else:
            with open(cfg, "rb") as f:
                text = f.read(8192).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None
    fields: dict[str, str] = {m.group(1): m.group(2) for m in re.finditer(r"(?m)^\s*([\w-]+)\s*=\s*(.*?)\s*$", text)}
    version = fields.get("version") or fields.get("version_info")
    home = fields.get("home")
    return f"venv of Python {version or '?'}" + (f" at {home}" if home else "")


def describe(command: str, cwd: Path | str, env: dict[str, str], settings: dict[str, Any] | None = None) -> str | None:
    """One line naming the program the command runs and what it really is, or None when the
    command starts with a shell construct (the shell then finds its programs on PATH)."""
    prog = first_program(command)
    if prog is None:
        return None
    where = _located(prog, Path(cwd), env, settings)
    if where is None:
        return f"{prog} (not found)"
    venv = _venv_python(where, Path(cwd)) if where.parent.name == "bin" else None
    if venv:
        # the interpreter of a venv is a link to its base Python, which pyvenv.cfg names already
        relative = "/" in prog and not os.path.isabs(prog)
        in_tree = Path(os.path.normpath(Path(cwd) / prog)) == where or Path(os.path.realpath(cwd)) / prog == where
        return f"{where} ({venv}" + (", shared from the main checkout)" if relative and not in_tree else ")")
    target = Path(os.path.realpath(where))
    return str(where) if target == where else f"{where} -> {target}"
