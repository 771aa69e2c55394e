"""How pilothouse starts its own Python processes on the host, outside any sandbox.

They run as the operator with every key readable, in a repository or a task worktree that a
worker wrote: `python -m …` puts the working directory first on the import path, so a `yaml.py`
or `sqlite3.py` left there would be imported unconfined. Every such process starts with `-I`
(neither the cwd, the script's dir, PYTHONPATH nor the user site is on its path), and its
environment loses the variables that point Python at code (what a later child without `-I`,
say a runner's own Python, would otherwise still honour).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# Variables that make a Python process load code or look elsewhere for its library
CODE_VARS = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
                       "PYTHONINSPECT", "PYTHONBREAKPOINT", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH"})


def python_argv(*args: str) -> list[str]:
    """argv of this interpreter, isolated, running `args` (e.g. "-m", "pilothouse", "dispatch")."""
    # -I also ignores PYTHONDONTWRITEBYTECODE: carry that choice over as -B
    flags = ["-I", "-B"] if sys.flags.dont_write_bytecode else ["-I"]
    return [sys.executable, *flags, *args]


def host_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without the variables that point Python at code."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in CODE_VARS}


def drop_cwd_from_path() -> None:
    """For an entry point started as `python -m pilothouse` without -I: the working directory
    (a repository a worker's branch was merged into) leaves the import path before any lazy import."""
    if sys.flags.isolated or sys.flags.safe_path:
        return
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != here]
