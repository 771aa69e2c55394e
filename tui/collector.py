"""Python's cyclic garbage collector, kept out of the keystrokes.

A full collection walks every object the process tracks: 30-100 ms with the cockpit's screens
built, a stall of whichever keystroke allocated past the threshold (most of the keys' p99 in
bench/cockpit.py). So once the first frame is drawn, what exists then (the modules, the dashboard,
the run detail once built: all of it lives as long as the app) is frozen out of every pass, the
automatic full pass is put off, and the app runs it itself once the operator has not typed for a
moment. The young generations are collected as always, and a long stretch of typing still gets an
automatic full pass after DEFERRED young ones: memory stays bounded.
"""

from __future__ import annotations

import gc
from time import monotonic

IDLE_S = 2.0  # no key or mouse input for this long: a full pass now delays no one
DEFERRED = 1000  # second-generation passes before Python runs a full one itself (its default: 10)
DUE = 10  # second-generation passes since the last full one that make an idle pass worth it


class Collector:
    def __init__(self) -> None:
        self.saved: tuple[int, int, int] | None = None  # the thresholds before settle()
        self.last_input = monotonic()

    def settle(self) -> None:
        """What exists now lives as long as the app: no pass walks it again (called after the first
        frame, and once the run detail is built)."""
        gc.freeze()
        if self.saved is None:
            self.saved = gc.get_threshold()
            gc.set_threshold(self.saved[0], self.saved[1], DEFERRED)

    def input(self) -> None:
        self.last_input = monotonic()

    def idle(self) -> bool:
        """A full pass when one is due and the operator is not typing; True when it ran."""
        if self.saved is None or gc.get_count()[2] < DUE or monotonic() - self.last_input < IDLE_S:
            return False
        gc.collect()
        return True

    def release(self) -> None:
        """The app is over: its objects can be collected again, and the thresholds are Python's (the
        tests run many apps in one process)."""
        gc.unfreeze()
        if self.saved is not None:
            gc.set_threshold(*self.saved)
            self.saved = None
