"""Drive `pilothouse mcp` the way a host does: the MCP SDK's own client over stdio, the server a
real subprocess with the test's isolated environment."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(fn())  # type: ignore[arg-type]


@asynccontextmanager
async def connect(cwd: Path, *args: str) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "pilothouse", "mcp", *args], cwd=str(cwd),
                                   env=dict(os.environ))
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def data(result: Any) -> Any:
    """A successful call's structured result (a list comes wrapped as {"result": [...]})."""
    assert not result.is_error, text(result)
    sc = result.structured_content
    return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def error(result: Any) -> str:
    """A failed call's message: one line, no traceback."""
    assert result.is_error, result
    msg = text(result)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def sim_repo(dest: Path, scenario: str) -> Path:
    """The demo's scratch project, set up for pilothouse on the simulator with `scenario`; no job yet."""
    from pilothouse.core.demo import configure, make_repo, test_command
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.repo_setup import init_project

    root = make_repo(dest)
    cmd = test_command()
    init_project(root, {"fast": cmd, "full": cmd}, stdin_is_tty=False)
    configure(RepoLayout(root), scenario)
    for args in (("add", "-A"), ("commit", "-q", "-m", "pilothouse init (sim)")):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root
