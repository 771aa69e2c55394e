"""The repository's append-only event log, `.ai/runtime/events.jsonl` (docs/contracts.md, "The event log").

Writers append one JSON object per line under an exclusive lock on a sibling lock file, so
`seq` stays strictly increasing across processes. Readers use EventTailer, which keeps an
offset and the file's inode, buffers a torn last line, restarts on truncation and reopens on
replacement. Nothing here polls: followers wake on watchfiles notifications (see `follow`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_TAIL_CHUNK = 64 * 1024


def utc_now_iso(now: datetime | None = None) -> str:
    """`now` (default: this instant) as the stored timestamp format, UTC with milliseconds."""
    # one reading: seconds and milliseconds must come from the same instant
    dt = (now or datetime.now(UTC)).astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_ts(value: str | None) -> datetime | None:
    """A stored timestamp as an aware UTC datetime; None for a missing or unreadable one (a
    view shows a blank rather than failing on one bad row). A naive value is taken as UTC."""
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _last_seq(fh: Any) -> int:
    """Read the seq of the last complete line (file opened 'rb', caller holds the lock)."""
    fh.seek(0, os.SEEK_END)
    end = fh.tell()
    pos = end
    buf = b""
    while pos > 0:
        step = min(_TAIL_CHUNK, pos)
        pos -= step
        fh.seek(pos)
        buf = fh.read(step) + buf
        lines = buf.split(b"\n")
        # lines[0] may be partial unless pos == 0; scan complete lines from the end
        candidates = lines if pos == 0 else lines[1:]
        for raw in reversed(candidates):
            raw = raw.strip()
            if not raw:
                continue
            try:
                return int(json.loads(raw)["seq"])
            except (ValueError, KeyError, TypeError):
                continue
    return 0


class EventLog:
    """Appender for one events.jsonl. Safe across processes and threads."""

    def __init__(self, path: Path, redact: Callable[[str], str] | None = None) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._redact = redact

    def append(
        self,
        type: str,
        *,
        job: str | None = None,
        task: str | None = None,
        run: str | None = None,
        data: dict[str, Any] | None = None,
        commit: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Append one event. `commit`, when given, makes the change the event reports and runs under
        the log's lock first (no line if it raises): another process that acts on that change — the
        supervisor on an operator's reply — can only log what it did after this line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                if commit is not None:
                    commit()
                with open(self.path, "ab+") as fh:
                    seq = _last_seq(fh) + 1
                    event = {"seq": seq, "ts": utc_now_iso(), "type": type, "job": job, "task": task,
                             "run": run, "data": data or {}}
                    line = json.dumps(event, separators=(",", ":"), default=str)
                    if self._redact is not None:
                        line = self._redact(line)
                    else:  # every configured key stays out of the log unless the caller redacts itself
                        from pilothouse.providers.redact import configured_redactor

                        line = configured_redactor().redact(line)
                    fh.seek(0, os.SEEK_END)
                    # a torn last line from a crashed writer must not swallow ours
                    if fh.tell() > 0:
                        fh.seek(-1, os.SEEK_END)
                        if fh.read(1) != b"\n":
                            fh.write(b"\n")
                    fh.write(line.encode() + b"\n")
                    fh.flush()
                    return event
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


class EventTailer:
    """Incremental reader of an events.jsonl: call `read_new()` whenever the file may have grown."""

    events_only = True  # skip objects without a "type" (not an event of this log)

    def __init__(self, path: Path, start_at_end: bool = False) -> None:
        self.path = Path(path)
        self.offset = 0
        self.inode: int | None = None
        self._partial = b""
        if start_at_end:
            try:
                st = self.path.stat()
                self.offset, self.inode = st.st_size, st.st_ino
            except FileNotFoundError:
                pass

    def tail(self, n: int) -> list[dict[str, Any]]:
        """The last n events, read backwards from the end; leaves the tailer positioned at the end."""
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                end = st.st_size
                pos = end
                buf = b""
                while pos > 0 and buf.count(b"\n") <= n:
                    step = min(_TAIL_CHUNK, pos)
                    pos -= step
                    fh.seek(pos)
                    buf = fh.read(step) + buf
        except FileNotFoundError:
            return []
        complete_end = buf.rfind(b"\n") + 1
        self._partial = buf[complete_end:]
        self.offset, self.inode = end, st.st_ino
        lines = buf[:complete_end].split(b"\n")
        if pos > 0:
            lines = lines[1:]
        events = [e for e in (_decode(raw, self.events_only) for raw in lines) if e is not None]
        return events[-n:] if n else []

    def read_new(self) -> list[dict[str, Any]]:
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            return []
        with fh:
            st = os.fstat(fh.fileno())
            if self.inode is not None and st.st_ino != self.inode:
                self.offset, self._partial = 0, b""  # replaced: read the new file from the start
            elif st.st_size < self.offset:
                self.offset, self._partial = 0, b""  # truncated: restart
            self.inode = st.st_ino
            if st.st_size == self.offset:
                return []
            fh.seek(self.offset)
            chunk = fh.read()
        self.offset += len(chunk)
        data = self._partial + chunk
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return [e for e in (_decode(raw, self.events_only) for raw in data[:cut].split(b"\n")) if e is not None]


class LineTailer(EventTailer):
    """The same incremental reader for any JSON-lines file (a run's normalised stream)."""

    events_only = False


def _decode(raw: bytes, events_only: bool = True) -> dict[str, Any] | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and ("type" in value or not events_only) else None


def follow(path: Path, stop_event: Any = None, from_start: bool = True, last: int | None = None,
           tailer: EventTailer | None = None) -> Iterator[dict[str, Any]]:
    """Yield events as they are appended, waking on filesystem notifications (watchfiles).

    The parent directory is watched, not the file, so creation and replacement are seen too.
    watchfiles falls back to polling by itself where inotify is unavailable. `tailer`: one placed
    earlier (e.g. before a supervisor starts, so none of its events is missed). `stop_event` (a
    threading.Event) ends the following; what was appended until then is still yielded.
    """
    from watchfiles import watch  # lazy: only followers pay for it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tailer is None:
        tailer = EventTailer(path, start_at_end=not from_start and last is None)
        if last is not None:
            yield from tailer.tail(last)
    yield from tailer.read_new()
    target = str(path.resolve())
    for changes in watch(path.parent, debounce=0, step=10, rust_timeout=500, yield_on_timeout=True,
                         stop_event=stop_event):
        if changes and not any(os.path.abspath(p) == target for _, p in changes):
            continue
        yield from tailer.read_new()
    yield from tailer.read_new()  # stopped: what was written as it stopped
