"""Output helpers shared by command groups (plain text for humans, --json for scripts)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def emit_json(obj: Any) -> None:
    import json

    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        line = "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip()
        sys.stdout.write(line + "\n")
        if n == 0:
            sys.stdout.write("  ".join("-" * w for w in widths) + "\n")


def say_skips(reader: Any) -> None:
    """What a reader of the event log (an EventTailer or an EventLookup) skipped, said once on stderr:
    every command that reads the log says it the same way."""
    notice = reader.skip_notice()
    if notice:
        print(f"pilothouse: {notice}", file=sys.stderr, flush=True)


def add_json_flag(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def positive_int(value: str) -> int:
    """argparse type: a whole number >= 1 (a count of workers, say), refused before anything runs."""
    import argparse

    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"'{value}' must be at least 1")
    return n


MAX_WORKERS = 64  # project.yaml's max_workers allows the same


def worker_count(value: str) -> int:
    """argparse type: how many workers at once, 1 to MAX_WORKERS."""
    import argparse

    n = positive_int(value[:40])
    if n > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"'{value[:40]}' is more than {MAX_WORKERS} workers at once")
    return n


def seconds(value: str) -> float:
    """argparse type: a duration in seconds, 0 or more."""
    return _seconds(value, above_zero=False)


def positive_seconds(value: str) -> float:
    """argparse type: a duration in seconds, more than 0 (a timeout of 0 would end a run at once)."""
    return _seconds(value, above_zero=True)


def _seconds(value: str, *, above_zero: bool) -> float:
    import argparse
    import math

    try:
        s = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of seconds") from None
    if not math.isfinite(s) or s < 0 or (above_zero and s == 0):
        raise argparse.ArgumentTypeError(f"'{value}' must be more than 0" if above_zero else
                                         f"'{value}' must be 0 or more seconds")
    return s
