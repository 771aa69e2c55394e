"""Turns at the repository's worktrees: one at a time, a launch's checkout before a pooling.

git does not support concurrent `worktree add` (nor `move`) in one repository, so the supervisor
makes and moves checkouts one at a time. Two kinds wait for a turn: a launch taking its checkout
(on the path from a dependency's verdict to its dependent's start) and a merged task's checkout on
its way into the pool (core/git/pool.py: six git calls, on nobody's path). A pooling used to take
its turn first, being started first (as its task merged), and the dependent readied by that merge
waited for it. Now a launch the loop has announced (`expect_launch`, before it starts the launch's
thread and before the pass starts its poolings) goes first. A launch that finds the pool empty
while a pooling is coming still waits for that pooling (`wait_for_pooling`): a new checkout of the
whole repository costs more than that wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POOLING_WAIT_S = 30.0  # the longest a launch waits for a pooling it could use
LAUNCH_WAIT_S = 10.0  # the longest a pooling yields to announced launches (one whose thread never came)


class Turns:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._launches = 0  # announced launches that have not had their turn yet
        self._poolings = 0  # poolings started and not yet done

    # --- launches ----------------------------------------------------------------------------------
    def expect_launch(self) -> None:
        """On the loop, before the launch's thread starts: poolings started after this wait for it."""
        with self._cond:
            self._launches += 1

    @contextmanager
    def launch(self, announced: bool = True) -> Iterator[Callable[[Callable[[], bool]], None]]:
        """A launch's turn; yields `wait_for_pooling(empty)`: when `empty()` (no pooled checkout to
        take) and a pooling is under way, the turn is let go until that pooling is done."""
        with self._cond:
            self._cond.wait_for(lambda: not self._held)
            self._held = True
            if announced:
                self._launches = max(0, self._launches - 1)
            self._cond.notify_all()

        def wait_for_pooling(empty: Callable[[], bool]) -> None:
            with self._cond:
                if not self._poolings or not empty():
                    return
                self._held = False
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._poolings or not empty(), timeout=POOLING_WAIT_S)
                self._cond.wait_for(lambda: not self._held)
                self._held = True

        try:
            yield wait_for_pooling
        finally:
            self._release()

    # --- poolings ----------------------------------------------------------------------------------
    def expect_pooling(self) -> None:
        """On the loop, when the pooling's thread is started: a launch finding the pool empty waits for it."""
        with self._cond:
            self._poolings += 1

    @contextmanager
    def pooling(self) -> Iterator[None]:
        """A pooling's turn, once no announced launch waits (bounded: a launch whose thread never
        came must not keep the pool from filling); the pooling counts as done when it ends."""
        deadline = time.monotonic() + LAUNCH_WAIT_S
        with self._cond:
            self._cond.wait_for(lambda: not self._held and (not self._launches or time.monotonic() >= deadline),
                                timeout=LAUNCH_WAIT_S)
            self._cond.wait_for(lambda: not self._held)
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._poolings = max(0, self._poolings - 1)
            self._release()

    # --- anything else that makes or moves a checkout (a cluster run's result landed) ---------------
    def __enter__(self) -> Turns:
        with self._cond:
            self._cond.wait_for(lambda: not self._held)
            self._held = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()
