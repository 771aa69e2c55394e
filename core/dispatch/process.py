"""Running one worker process: spawn, stream, time out, abort.

The worker runs in its own process group with exactly the launch's environment. Its stdout is
split into lines for the runner's parser; stderr goes to the run's stderr log. Three limits end
it early — the overall timeout, the idle timeout (no output at all for N seconds) and an abort
request (SIGINT/SIGTERM to dispatch, or the step cap) — always the same way: SIGTERM to the
group, a grace period while its output is still drained, then SIGKILL.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pilothouse.core.dispatch import priority as cpu_priority
from pilothouse.providers.runners.base import LaunchSpec

GRACE_S = 5.0
DRAIN_AFTER_EXIT_S = 0.5  # grandchildren may hold the pipes open after the worker exits


@dataclass
class ProcOutcome:
    pid: int = 0
    exit_code: int | None = None
    timed_out: bool = False
    idle_timed_out: bool = False
    interrupted: bool = False
    aborted_reason: str | None = None
    spawn_error: str | None = None


class WorkerProcess:
    """Spawned at construction; `watch()` streams it to the end."""

    def __init__(self, launch: LaunchSpec, defer_stdin: bool = False) -> None:
        """defer_stdin: open stdin as a pipe but write nothing yet; call feed() later (dispatch
        starts the worker before the sim is up, so both boot in parallel)."""
        self.outcome = ProcOutcome()
        self.abort_reason: str | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.proc = subprocess.Popen(
                launch.argv, env=launch.env, cwd=launch.cwd,
                stdin=subprocess.PIPE if launch.stdin is not None or defer_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        except OSError as exc:
            self.outcome.spawn_error = f"cannot start {launch.argv[0]}: {exc.strerror or exc}"
            return
        self.outcome.pid = self.proc.pid
        # the worker's session is a scheduling group of its own: it gets our (lowered) priority too
        cpu_priority.set_session(self.proc.pid, cpu_priority.own_nice())
        if launch.stdin is not None and not defer_stdin:
            self.feed(launch.stdin)

    def feed(self, data: bytes) -> None:
        """Write the worker's whole stdin and close it."""
        assert self.proc is not None
        stdin = self.proc.stdin
        if stdin is None:
            return

        def write() -> None:  # a thread for big inputs: must not deadlock against a full stdout pipe
            try:
                stdin.write(data)
                stdin.close()
            except OSError:
                pass
        if len(data) < 16384:
            write()
        else:
            threading.Thread(target=write, daemon=True).start()

    def kill(self) -> None:
        """Immediate end (the run never started as far as anyone else knows)."""
        if self.proc is not None:
            self._signal_group(signal.SIGKILL)
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass

    def request_abort(self, reason: str) -> None:
        """Thread- and signal-safe: ask watch() to end the worker."""
        if self.abort_reason is None:
            self.abort_reason = reason
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        if sig == signal.SIGTERM:
            # (helper F) a confined worker sits under bwrap, which does not forward signals and, killed,
            # takes the sandbox down with SIGKILL: the graceful SIGTERM goes to the processes inside
            from pilothouse.providers.confine import signal_sandbox

            if signal_sandbox(self.proc.pid, sig):
                return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def watch(self, on_stdout: Callable[[str], None], on_stderr: Callable[[bytes], None],
              timeout_s: float, idle_timeout_s: float) -> ProcOutcome:
        out = self.outcome
        if self.proc is None:
            return out
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        start = last = time.monotonic()
        partial = b""
        open_streams = 2
        term_at: float | None = None
        exited_at: float | None = None
        try:
            while open_streams:
                now = time.monotonic()
                if term_at is None:
                    if self.abort_reason is not None:
                        out.aborted_reason = self.abort_reason
                        out.interrupted = self.abort_reason == "interrupted"
                    elif timeout_s and now - start >= timeout_s:
                        out.timed_out = True
                    elif idle_timeout_s and now - last >= idle_timeout_s:
                        out.idle_timed_out = True
                    if self.abort_reason is not None or out.timed_out or out.idle_timed_out:
                        self._signal_group(signal.SIGTERM)
                        term_at = now
                elif now - term_at >= GRACE_S:
                    self._signal_group(signal.SIGKILL)
                    term_at = float("inf")
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at >= DRAIN_AFTER_EXIT_S:
                    break
                waits = [0.25 if exited_at is not None else 3600.0]
                if term_at is None:
                    if timeout_s:
                        waits.append(start + timeout_s - now)
                    if idle_timeout_s:
                        waits.append(last + idle_timeout_s - now)
                elif term_at != float("inf"):
                    waits.append(term_at + GRACE_S - now)
                if exited_at is None:
                    waits.append(0.5)  # notice an exit whose pipes stay open (grandchildren)
                for key, _ in sel.select(max(0.0, min(waits))):
                    if key.data == "wake":
                        os.read(self._wake_r, 512)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    last = time.monotonic()
                    if key.data == "err":
                        on_stderr(chunk)
                        continue
                    partial += chunk
                    *lines, partial = partial.split(b"\n")
                    for raw in lines:
                        if raw.strip():
                            on_stdout(raw.decode("utf-8", "replace"))
            if partial.strip():
                on_stdout(partial.decode("utf-8", "replace"))
            try:
                out.exit_code = proc.wait(timeout=GRACE_S if term_at is None else 0.5)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                out.exit_code = proc.wait()
        finally:
            sel.close()
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        return out


class SignalGuard:
    """While active, SIGINT/SIGTERM abort the worker instead of killing dispatch, so a verdict
    (interrupted: true) is still written and printed."""

    def __init__(self) -> None:
        self.worker: WorkerProcess | None = None
        self.received = False
        self._old: dict[int, object] = {}

    def _handler(self, signum: int, frame: object) -> None:
        self.received = True
        if self.worker is not None:
            self.worker.request_abort("interrupted")

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
