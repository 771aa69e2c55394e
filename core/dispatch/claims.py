"""A worker's result block is a claim: checked here against the prompt it was given and the work.

- the prompt template's own example block (`"<one finding>"`, `"<path>"`) is not an answer;
- a required field left empty (`"facts": []`, `"tasks": []`, `"summary": ""`) is not a result;
- a code run's `files_changed` must be files the run changed, and "complete" with no change is
  nothing done;
- an explore fact must cite a regular file inside the workdir. The path is the worker's, so it is
  hostile input: it is looked up with workerfs.read_in_tree, which never follows a link out.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

_RESULT_RE = re.compile(r"<!--RESULT-->(.*?)<!--/RESULT-->", re.DOTALL)
_PLACEHOLDER = re.compile(r"<[^<>\n]{1,60}>")
_FILE_LINE = re.compile(r"^(?P<path>.+?)(?::(?P<line>\d+)(?:[-:]\d+)?)?$")
_FACT_READ_LIMIT = 8 << 20  # a cited file is read up to this size to see that its line exists


def _leaves(data: Any, where: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [leaf for k, v in data.items() for leaf in _leaves(v, f"{where}.{k}" if where else str(k))]
    if isinstance(data, list):
        return [leaf for i, v in enumerate(data) for leaf in _leaves(v, f"{where}[{i}]")]
    return [(where, data)]


@cache
def template_placeholders(mode: str) -> frozenset[str]:
    """The placeholder strings of the mode's example result block (data/prompts/MODE.md)."""
    from pilothouse.core.dispatch.prepare import preamble

    try:
        block = _RESULT_RE.findall(preamble("code" if mode == "resume" else mode))
        example = json.loads(block[-1]) if block else None
    except (OSError, ValueError):
        return frozenset()
    return frozenset(v for _, v in _leaves(example) if isinstance(v, str) and _PLACEHOLDER.search(v))


def _required(mode: str) -> list[tuple[str, str]]:
    """(field path, kind) of the required str/list fields of the mode's result schema."""
    from pilothouse.providers.contract_fast import MODELS, REQUIRED, RESULT_MODELS

    out: list[tuple[str, str]] = []

    def walk(name: str, prefix: str) -> None:
        for fname, _, spec, default in MODELS[name][1]:
            if default is not REQUIRED:
                continue
            if spec == "str":
                out.append((prefix + fname, "str"))
            elif isinstance(spec, tuple) and spec[0] == "list":
                out.append((prefix + fname, "list"))
                if isinstance(spec[1], tuple) and spec[1][0] == "model":
                    walk(spec[1][1], prefix + fname + "[]")
            elif isinstance(spec, tuple) and spec[0] == "model":
                walk(spec[1], prefix + fname + ".")

    name = RESULT_MODELS.get(mode)
    if name is not None:
        walk(name, "")
    return out


def _values(data: Any, path: str) -> list[tuple[str, Any]]:
    """The values at `path` ("facts[].file_line"), each with its concrete location."""
    found: list[tuple[str, Any]] = [("", data)]
    for part in re.findall(r"[^.\[\]]+|\[\]", path):
        nxt: list[tuple[str, Any]] = []
        for where, value in found:
            if part == "[]":
                if isinstance(value, list):
                    nxt += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, dict) and part in value:
                nxt.append((f"{where}.{part}" if where else part, value[part]))
        found = nxt
    return found


def vet_result(result: dict[str, Any], mode: str) -> str | None:
    """Why a schema-valid result block is still no result, or None when it is one."""
    marks = template_placeholders(mode)
    for where, value in _leaves(result):
        if isinstance(value, str) and value in marks:
            return (f"field '{where}' still holds the prompt's placeholder {value!r}: the block is the "
                    "example, not an answer")
    for path, kind in _required(mode):
        for where, value in _values(result, path):
            if (kind == "list" and value == []) or (kind == "str" and isinstance(value, str) and not value.strip()):
                return f"field '{where}' is empty: a result needs it filled in"
    return None


def check_code(result: dict[str, Any], changed: list[str]) -> tuple[str, str] | None:
    """(verdict, reason) when a parsed code result's claims do not match the files the run changed."""
    claimed = [str(f) for f in result.get("files_changed") or []]
    if result.get("status") != "complete":
        return None
    if not changed:
        named = f" (files_changed: {', '.join(claimed[:5])})" if claimed else ""
        return "empty", f"the result says complete{named}, but the run made no change in the worktree"
    invented = [f for f in claimed if f.strip("/").removeprefix("./") not in changed]
    if invented:
        return "partial", (f"files_changed names {', '.join(invented[:5])}, which the run did not change "
                           f"(it changed {', '.join(changed[:5])})")
    return None


def check_facts(result: dict[str, Any], root: Path | str) -> str | None:
    """Why an explore result's facts do not point at real files in `root`, or None."""
    facts = [f for f in result.get("facts") or [] if isinstance(f, dict)]
    bad = [str(f.get("file_line", "")) for f in facts if not _cites_real_line(root, str(f.get("file_line", "")))]
    if not bad:
        return None
    return (f"{len(bad)} of {len(facts)} facts cite no line of a file in the workdir: "
            + ", ".join(repr(b[:80]) for b in bad[:3]))


def _cites_real_line(root: Path | str, file_line: str) -> bool:
    from pilothouse.providers.workerfs import read_in_tree

    m = _FILE_LINE.match(file_line.strip())
    if not m:
        return False
    rel = m.group("path").strip().removeprefix("./")
    try:
        entry = read_in_tree(root, rel, _FACT_READ_LIMIT)
    except (OSError, ValueError):
        return False  # absolute, `..`, or unreadable: not a file of this workdir
    if entry.kind != "file":
        return False  # missing, a link (never followed), or not a regular file
    line = int(m.group("line") or 0)
    if line == 0 or entry.truncated:
        return True
    return line <= entry.data.count(b"\n") + (0 if entry.data.endswith(b"\n") or not entry.data else 1)
