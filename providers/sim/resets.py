"""Reset times of `until_reset` errors, shared by every sim process of the user.

A scripted 429 with `until_reset: true` is served until its reset time has passed and then
skipped, the way a real quota window behaves. Dispatch starts a fresh sim per run, so the first
sighting's reset time must outlive the process: it is kept in a small JSON file (under a lock),
keyed by scenario, script, turn and the worker prompt. Entries an hour past their reset are
dropped, so replaying a scenario later meets the error again.
"""

from __future__ import annotations

import fcntl
import json
import time
from pathlib import Path

from pilothouse.providers.fsutil import atomic_write_text

FORGET_AFTER_S = 3600


class ResetBook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def reset_at(self, key: str, retry_after_s: int, now: float | None = None) -> float:
        """The reset time for `key`, starting its window now if this is the first sighting."""
        now = time.time() if now is None else now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            book = self._read()
            book = {k: v for k, v in book.items() if v + FORGET_AFTER_S > now}
            if key not in book:
                book[key] = now + retry_after_s
                atomic_write_text(self.path, json.dumps(book, indent=1) + "\n")
            return book[key]

    def passed(self, key: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        value = self._read().get(key)
        return value is not None and value <= now < value + FORGET_AFTER_S

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
