"""The fingerprint of a setup failure: the same failure in two worktrees hashes alike.

Stdlib only, the bottom of the stop logic: problems stamps it on a setup_failed problem and
holds groups problems by it.
"""

from __future__ import annotations

import hashlib
import re

_VOLATILE = [
    (re.compile(r"\b\d+(\.\d+)?\s*(s|ms|sec|seconds)\b"), "<dur>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{7,40}\b"), "<sha>"),
    (re.compile(r"(/[\w.@+-]+)+"), "<path>"),
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z?"), "<ts>"),
    (re.compile(r"\b\d+\b"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
]


def setup_fingerprint(command: str, output_tail: str) -> str:
    """The same setup failure in two worktrees gives the same fingerprint.

    Worktree paths, durations, addresses, hashes and counts differ between tasks failing the
    same way, so they are masked before hashing; only the last lines (the error) count.
    """
    lines = [ln for ln in output_tail.strip().splitlines() if ln.strip()][-8:]
    text = "\n".join(lines)
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return hashlib.sha256(f"{command.strip()}\n{text.strip()}".encode()).hexdigest()[:16]
