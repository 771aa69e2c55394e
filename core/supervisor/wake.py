"""What wakes the supervisor: a run's process exiting, a gate or merge finishing, an operator's
write to the runtime store or the job records, a worker's log growing. Nothing here polls.

- run exits: a pidfd per dispatch (ours or adopted from a previous supervisor) in a selector;
- verdicts: a pipe per dispatch we spawned, written once its verdict.json is on disk;
- threads (gates, merges, the file watcher, signal handlers) write a byte to a self-pipe;
- a watchfiles thread watches `.ai/runtime/` (state.db-wal, events), `.ai/jobs/`, `.ai/tasks.yaml`
  and the providers' log folders, and reports which kind of thing changed.
"""

from __future__ import annotations

import os
import queue
import selectors
import threading
from pathlib import Path
from typing import Any


class Waker:
    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self._r, selectors.EVENT_READ, ("pipe", None))
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._pidfds: dict[str, int] = {}
        self._notify: dict[str, int] = {}  # run id -> read end of the dispatch's verdict pipe

    def post(self, kind: str, payload: Any = None) -> None:
        """From any thread (or a signal handler): queue an item and wake the loop."""
        self.inbox.put((kind, payload))
        self.poke()

    def poke(self) -> None:
        try:
            os.write(self._w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: the loop is going to wake anyway

    def watch_pid(self, run_id: str, pid: int) -> bool:
        """Wake when `pid` exits; False if it is already gone."""
        if run_id in self._pidfds:
            return True
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        self._pidfds[run_id] = fd
        self.selector.register(fd, selectors.EVENT_READ, ("exit", run_id))
        return True

    def unwatch_pid(self, run_id: str) -> None:
        self._forget(self._pidfds, run_id)
        self._forget(self._notify, run_id)

    def _forget(self, fds: dict[str, int], run_id: str) -> None:
        fd = fds.pop(run_id, None)
        if fd is not None:
            self.selector.unregister(fd)
            os.close(fd)

    def ended(self, run_id: str) -> None:
        """From an executor's thread: the run `run_id` is over (as its pidfd would say of a process)."""
        self.post("exit", run_id)

    def watch_verdict(self, run_id: str, fd: int) -> None:
        """Wake when the dispatch writes to its end of the pipe `fd`: its verdict is on disk (sooner
        than the file watcher, which batches changes, and than its exit, which comes after cleanup)."""
        os.set_blocking(fd, False)
        self._notify[run_id] = fd
        self.selector.register(fd, selectors.EVENT_READ, ("notify", run_id))

    def wait(self, timeout: float | None) -> tuple[list[str], list[tuple[str, Any]]]:
        """Block until something happens; returns (exited run ids, queued items)."""
        exited: list[str] = []
        items: list[tuple[str, Any]] = []
        if self.inbox.empty():
            for key, _ in self.selector.select(timeout):
                kind, value = key.data
                if kind == "exit":
                    exited.append(value)
                elif kind == "notify":
                    self._verdict_written(value, key.fd, items)
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if item[0] == "exit":
                exited.append(item[1])
            else:
                items.append(item)
        return exited, items

    def _verdict_written(self, run_id: str, fd: int, items: list[tuple[str, Any]]) -> None:
        try:
            data = os.read(fd, 64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            items.append(("verdict", run_id))
            return
        self._forget(self._notify, run_id)  # EOF: the dispatch is gone (its pidfd reports the exit)


class FileWatcher(threading.Thread):
    """Reports changes under `.ai/` and the run logs to the waker as ("fs", {"store"|"records"|"logs"}) items."""

    def __init__(self, waker: Waker, ai: Path, logs: Path) -> None:
        super().__init__(name="supervisor-watch", daemon=True)
        self.waker = waker
        self.ai = ai.resolve()
        self.runtime = self.ai / "runtime"
        self.logs = logs.resolve()
        self.stop_event = threading.Event()

    def _classify(self, path: str) -> str | None:
        if path.endswith((".lock", ".tmp", "-shm", "supervisor.log")):
            return None
        p = Path(path)
        if p.is_relative_to(self.logs):
            if path.endswith(".verdict.json"):
                self.waker.inbox.put(("verdict", p.name[: -len(".verdict.json")]))
                return "logs"
            return "logs" if path.endswith(".jsonl") else None
        if p.is_relative_to(self.runtime):
            # the operator writes state.db (replies); the event log carries every other process's news
            if p.name.startswith("state.db") or p.name == "events.jsonl":
                return "store"
            return None
        return "records"

    def run(self) -> None:
        from watchfiles import watch

        for r in (self.runtime, self.logs):
            r.mkdir(parents=True, exist_ok=True)
        for changes in watch(self.ai, self.logs, debounce=20, step=10, rust_timeout=1000, yield_on_timeout=True,
                             stop_event=self.stop_event, raise_interrupt=False):
            if self.stop_event.is_set():
                return
            kinds = {k for k in (self._classify(path) for _, path in changes) if k}
            if kinds:
                self.waker.post("fs", kinds)
