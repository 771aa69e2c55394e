"""Following files live: the repository's events.jsonl and a run's normalised stream.

A follower runs in a thread, sleeps in watchfiles until the watched directory changes (watching
the parent directory sees creation and replacement; watchfiles polls by itself where inotify is
deaf), reads only what was appended, and hands over one batch per wake-up, no more often than
`min_interval` — a burst of a thousand lines becomes a few messages, not a thousand repaints.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.core.state.events import EventLogUnusable, EventTailer, LineTailer


class Follower:
    """Follows `path` from a daemon thread; `wake()` is called when new lines wait in `take()`.

    At most one wake-up is outstanding: lines that arrive while the consumer is still busy join
    the waiting batch instead of queueing another message, so a slow frame never builds a backlog.
    """

    def __init__(self, path: Path, tailer: EventTailer | LineTailer, wake: Callable[[], None],
                 min_interval: float = 1 / 30) -> None:
        self.path = Path(path)
        self.tailer = tailer
        self.wake = wake
        self.min_interval = min_interval
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._woken = False

    def take(self) -> list[dict[str, Any]]:
        """Everything read since the last take (called by the consumer after a wake-up)."""
        with self._lock:
            batch, self._pending, self._woken = self._pending, [], False
        return batch

    def start(self) -> Follower:
        self._thread = threading.Thread(target=self._run, name=f"follow:{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _pump(self) -> None:
        try:
            batch = self.tailer.read_new()
        except EventLogUnusable:  # said once when the screen opened; read again once it is a file
            return
        if not batch or self.stop_event.is_set():
            return
        with self._lock:
            self._pending.extend(batch)
            if self._woken:
                return
            self._woken = True
        self.wake()

    def _run(self) -> None:
        from watchfiles import watch

        parent = self.path.parent
        while not parent.exists() and not self.stop_event.wait(0.5):
            pass  # a repository with no runtime dir yet: wait for the first job
        target = os.path.abspath(self.path)
        last = 0.0
        self._pump()
        try:
            # yield_on_timeout: a wake-up each second with no change closes the tiny window between
            # the first read and the watch starting, and covers a deaf notifier
            for _changes in watch(parent, watch_filter=lambda _c, p: os.path.abspath(p) == target,
                                  debounce=30, step=5, rust_timeout=1000, yield_on_timeout=True,
                                  stop_event=self.stop_event, raise_interrupt=False, recursive=False):
                if self.stop_event.is_set():
                    return
                gap = time.monotonic() - last
                if gap < self.min_interval:
                    time.sleep(self.min_interval - gap)  # coalesce: the next read takes the rest
                last = time.monotonic()
                self._pump()
        except Exception:  # noqa: BLE001 - a vanished directory must not kill the app; poll instead
            while not self.stop_event.wait(0.5):
                self._pump()

