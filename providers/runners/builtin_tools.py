"""The builtin worker's tools: read, write, edit, bash, glob, grep — all confined to the workdir.

Every path is resolved (symlinks followed) and must land inside the workdir; anything else is
refused and reported as `denied`, which dispatch counts as a permission denial. An OS refusal
(EROFS/EACCES — what bubblewrap confinement produces) is a denial too. Stdlib only.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
from pathlib import Path

TYPE_CHECKING = False  # typing costs the worker's start-up ~5 ms; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_READ = 200_000
MAX_OUTPUT = 30_000
MAX_MATCHES = 300
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

_SPECS: dict[str, tuple[str, dict[str, str], list[str]]] = {
    "read": ("Read a text file in the workdir.", {"path": "file path relative to the workdir"}, ["path"]),
    "write": ("Create or overwrite a file in the workdir.",
              {"path": "file path relative to the workdir", "content": "the whole new file content"},
              ["path", "content"]),
    "edit": ("Replace one exact occurrence of `old` with `new` in a file.",
             {"path": "file path relative to the workdir", "old": "exact text to replace (must occur once)",
              "new": "replacement text"}, ["path", "old", "new"]),
    "bash": ("Run a shell command in the workdir; returns exit code and output.",
             {"command": "the bash command line"}, ["command"]),
    "glob": ("List files matching a glob pattern (e.g. src/**/*.py), relative to the workdir.",
             {"pattern": "glob pattern"}, ["pattern"]),
    "grep": ("Search file contents with a regular expression.",
             {"pattern": "Python regular expression", "path": "file or directory to search (default: .)"},
             ["pattern"]),
}

# Which tools each mode may use: read-only modes cannot change the workdir through the tools.
MODE_TOOLS = {
    "explore": ("read", "glob", "grep"),
    "review": ("read", "glob", "grep"),
    "plan": ("read", "glob", "grep"),
    "test": ("read", "glob", "grep", "bash"),
    "code": ("read", "write", "edit", "bash", "glob", "grep"),
    "resume": ("read", "write", "edit", "bash", "glob", "grep"),
}


def tool_schemas(mode: str) -> list[dict[str, Any]]:
    out = []
    for name in MODE_TOOLS.get(mode, MODE_TOOLS["explore"]):
        desc, props, required = _SPECS[name]
        out.append({"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v}
                                                            for k, v in props.items()},
                           "required": required}}})
    return out


class Denied(Exception):
    pass


class ToolFailed(Exception):
    pass


class Tools:
    def __init__(self, workdir: Path, mode: str, env: dict[str, str], deadline: Callable[[], float],
                 on_progress: Callable[[], None] | None = None) -> None:
        self.root = workdir.resolve()
        self.allowed = set(MODE_TOOLS.get(mode, MODE_TOOLS["explore"]))
        self.env = env
        self.deadline = deadline  # seconds left in the run
        self.on_progress = on_progress

    def resolve(self, rel: str) -> Path:
        if not isinstance(rel, str) or not rel or "\0" in rel:
            raise ToolFailed("a non-empty path is required")
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise Denied(f"permission denied: {rel} is outside the workdir")
        return p

    def _rel(self, p: Path) -> str:
        return str(p.relative_to(self.root)) if p != self.root else "."

    def run(self, name: str, args: dict[str, Any]) -> tuple[str, str]:
        """(status ok|error|denied, text for the model)."""
        if name not in self.allowed:
            return "denied", f"permission denied: tool '{name}' is not available in this mode"
        try:
            fn = getattr(self, f"t_{name}")
            return "ok", fn(**{k: v for k, v in args.items() if isinstance(k, str)})
        except Denied as exc:
            return "denied", str(exc)
        except ToolFailed as exc:
            return "error", str(exc)
        except TypeError as exc:
            return "error", f"bad arguments for {name}: {exc}"
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                return "denied", f"permission denied: {exc.strerror}"
            return "error", f"{exc.strerror or exc}"

    def t_read(self, path: str, offset: Any = None, limit: Any = None) -> str:
        p = self.resolve(path)
        if p.is_dir():
            raise ToolFailed(f"{path} is a directory; use glob to list it")
        if not p.exists():
            raise ToolFailed(f"{path} does not exist")
        text = p.read_bytes()[:MAX_READ].decode("utf-8", "replace")
        if offset or limit:
            lines = text.splitlines(keepends=True)
            start = max(int(offset or 1) - 1, 0)
            text = "".join(lines[start:start + int(limit or len(lines))])
        return text

    def t_write(self, path: str, content: str) -> str:
        p = self.resolve(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(str(content), encoding="utf-8")
        return f"wrote {self._rel(p)} ({len(str(content))} chars)"

    def t_edit(self, path: str, old: str, new: str) -> str:
        p = self.resolve(path)
        if not p.is_file():
            raise ToolFailed(f"{path} does not exist")
        text = p.read_text(encoding="utf-8")
        n = text.count(old) if old else 0
        if n != 1:
            raise ToolFailed(f"`old` text occurs {n} times in {path}; it must occur exactly once")
        p.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {self._rel(p)}"

    def t_bash(self, command: str) -> str:
        import subprocess  # lazy: read-only modes never run commands

        budget = max(1.0, min(600.0, self.deadline()))
        try:
            proc = subprocess.Popen(["bash", "-c", command], cwd=self.root, env=self.env, text=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    process_group=0)  # killable as a group, in our session
        except OSError as exc:
            raise ToolFailed(f"cannot run bash: {exc.strerror}") from None
        import time

        end = time.monotonic() + budget
        while True:
            try:
                # in slices, with a progress line between them: a long test run is not an idle worker
                out, _ = proc.communicate(timeout=max(0.01, min(5.0, end - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= end:
                    os.killpg(proc.pid, 9)
                    out, _ = proc.communicate()
                    raise ToolFailed(f"command timed out after {budget:.0f}s: {out[-2000:]}") from None
                if self.on_progress is not None:
                    self.on_progress()
        out = out[-MAX_OUTPUT:]
        if proc.returncode != 0 and ("Read-only file system" in out or "Permission denied" in out):
            raise Denied(f"exit code {proc.returncode} (permission denied)\n{out}")
        return f"exit code {proc.returncode}\n{out}"

    def _walk(self, base: Path) -> list[Path]:
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            out.extend(Path(dirpath) / f for f in sorted(filenames))
        return out

    def t_glob(self, pattern: str) -> str:
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            raise Denied(f"permission denied: {pattern} reaches outside the workdir")
        hits = []
        for p in self._walk(self.root):
            rel = self._rel(p)
            if fnmatch.fnmatch(rel, pattern) or ("/" not in pattern and fnmatch.fnmatch(p.name, pattern)) \
                    or (pattern.startswith("**/") and fnmatch.fnmatch(rel, pattern[3:])):
                hits.append(rel)
                if len(hits) >= MAX_MATCHES:
                    break
        return "\n".join(hits) if hits else "(no files match)"

    def t_grep(self, pattern: str, path: str = ".") -> str:
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise ToolFailed(f"bad regular expression: {exc}") from None
        base = self.resolve(path or ".")
        files = [base] if base.is_file() else self._walk(base)
        hits = []
        for f in files:
            try:
                data = f.read_bytes()[:MAX_READ]
            except OSError:
                continue
            if b"\0" in data[:4096]:
                continue
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{self._rel(f)}:{n}: {line[:300]}")
                    if len(hits) >= MAX_MATCHES:
                        return "\n".join(hits) + "\n(truncated)"
        return "\n".join(hits) if hits else "(no matches)"
