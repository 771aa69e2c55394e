"""The repository's append-only event log, `.ai/runtime/events.jsonl` (docs/contracts.md, "The event log").

Writers append one JSON object per line under an exclusive lock on a sibling lock file, so
`seq` stays strictly increasing across processes. Readers use EventTailer, which keeps an
offset and the file's inode, buffers a torn last line, restarts on truncation and reopens on
replacement. The file is anyone's to edit, so no line is trusted: one that is not an event
(`event_problem`) is skipped and counted by every reader and by the writer's seq scan, and the file
itself is opened only through `open_log`, which refuses a directory, a FIFO or a device in its place.
Nothing here polls: followers wake on watchfiles notifications (see `follow`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pilothouse.core.state.log_faults import EventLogUnusable, open_log, skip_notice  # noqa: F401

_TAIL_CHUNK = 64 * 1024
_READ_CHUNK = 1 << 20
_MARK = 256


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
        return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: a zone that moves it past year 9999 or before 1
        return None


def event_seconds(value: object) -> float | None:
    """An event's `ts` as seconds since the epoch (naive is UTC); None for anything else or unreadable."""
    dt = parse_ts(value) if isinstance(value, str) else None
    return dt.timestamp() if dt is not None else None


# seq stays well inside SQLite's and JSON consumers' integer range; a writer that reaches it
# starts again at 1, which every reader follows (they go by byte offset, never by seq)
MAX_SEQ = 2**53
# a longer line is not an event this project writes (a run's output is capped far below it)
MAX_LINE = 1 << 20
_OPTIONAL_STR = ("ts", "job", "task", "run")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def event_problem(value: Any) -> str | None:
    """Why `value` (one decoded line) is not an event of this log, or None when it is one.

    Every reader goes through this, so a hostile or damaged line is one skipped line, never a
    TypeError in a viewer or an OverflowError in the writer's seq scan."""
    if not isinstance(value, dict):
        return "not a JSON object"
    seq = value.get("seq")
    if type(seq) is not int or not 0 < seq <= MAX_SEQ:
        return "seq is not a positive integer"
    if not isinstance(value.get("type"), str) or not value["type"]:
        return "type is not a non-empty string"
    for field in _OPTIONAL_STR:
        if value.get(field) is not None and not isinstance(value[field], str):
            return f"{field} is not a string"
    if value.get("data") is not None and not isinstance(value["data"], dict):
        return "data is not an object"
    return None


def parse_line(raw: bytes) -> tuple[Any, str | None]:
    """(the decoded value, None) or (None, why it could not be decoded) for one line."""
    if len(raw) > MAX_LINE:
        return None, f"longer than {MAX_LINE} bytes"
    try:
        return json.loads(raw, parse_constant=_no_constants), None
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:  # bad JSON, bad UTF-8, NaN/Infinity, an integer too long to read
        return None, f"not JSON ({str(exc).split(':')[0]})"


def decode_event(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    value, why = parse_line(raw)
    if why is None:
        why = event_problem(value)
    return (value, None) if why is None else (None, why)


def _last_seq(fh: Any) -> int:
    """The seq of the last valid event (file opened 'rb', caller holds the lock)."""
    fh.seek(0, os.SEEK_END)
    pos = fh.tell()
    buf = b""
    while pos > 0:
        step = min(_TAIL_CHUNK, pos)
        pos -= step
        fh.seek(pos)
        buf = fh.read(step) + buf
        lines = buf.split(b"\n")
        # lines[0] may be partial unless pos == 0: it is kept for the next (earlier) chunk
        buf = b"" if pos == 0 else lines[0]
        for raw in reversed(lines if pos == 0 else lines[1:]):
            if raw.strip():
                event, _ = decode_event(raw)
                if event is not None:
                    return int(event["seq"])
        if len(buf) > MAX_LINE:
            buf = b""  # a monster line is no event: do not hold it in memory
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
                # opened before the change is made: a log that cannot be kept (a directory or a FIFO
                # in its place) refuses the change too, instead of leaving it made and unlogged.
                # Unbuffered: a write that fails (a full disk) fails here, not later in a flush
                fh = open_log(self.path, writing=True)
                assert fh is not None
                with fh:
                    redact = self._redact
                    if redact is None:  # every configured key stays out of the log unless the caller redacts itself
                        from pilothouse.providers.redact import configured_redactor

                        # before the change: keys that cannot be read (a broken backend) refuse it,
                        # instead of leaving it made and its event unwritten
                        redact = configured_redactor().redact
                    if commit is not None:
                        commit()
                    seq = _last_seq(fh) % MAX_SEQ + 1
                    event = {"seq": seq, "ts": utc_now_iso(), "type": type, "job": job, "task": task,
                             "run": run, "data": data or {}}
                    line = redact(json.dumps(event, separators=(",", ":"), default=str))
                    payload = line.encode() + b"\n"
                    end = fh.seek(0, os.SEEK_END)
                    # a torn last line from a crashed writer must not swallow ours
                    if end > 0:
                        fh.seek(-1, os.SEEK_END)
                        if fh.read(1) != b"\n":
                            payload = b"\n" + payload
                    try:
                        if os.write(fh.fileno(), payload) != len(payload):
                            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    except OSError as exc:  # name the log, and leave no torn line behind
                        os.ftruncate(fh.fileno(), end)
                        raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
                    return event
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


class EventTailer:
    """Incremental reader of an events.jsonl: call `read_new()` whenever the file may have grown.

    A line that is not an event is skipped and counted (`skipped`, `first_skip`); `skip_notice()`
    says so once. The file is followed by byte offset: truncated, replaced, or truncated and
    written past the old offset again (seq restarting at 1 included), it is read from its new start.
    """

    events_only = True  # skip what is not an event of this log (`event_problem`)

    def __init__(self, path: Path, start_at_end: bool = False) -> None:
        self.path = Path(path)
        self.offset = 0
        self.inode: int | None = None
        self.skipped = 0
        self.first_skip: str | None = None
        self.restarts = 0
        self._partial = b""
        self._mark = b""  # the bytes just before `offset`: the file still has them unless rewritten
        self._noticed = False
        self._before_tail: tuple[int, str | None] | None = None
        if start_at_end:
            fh = open_log(self.path)
            if fh is not None:
                with fh:
                    st = os.fstat(fh.fileno())
                    self._place(fh, st.st_size, st.st_ino)

    def _place(self, fh: Any, offset: int, inode: int) -> None:
        self.offset, self.inode = offset, inode
        fh.seek(max(0, offset - _MARK))
        self._mark = fh.read(offset - max(0, offset - _MARK))

    def tail(self, n: int) -> list[dict[str, Any]]:
        """The last n events, read backwards from the end; leaves the tailer positioned at the end.
        Lines that are not events do not count: it reads further back until it has n or the start.

        Backwards, only where lines end is kept; each line is then read on its own, and one longer
        than MAX_LINE is skipped (with the others' note) without being read: a 50 MB line costs one
        pass over it, not one per chunk."""
        if self._before_tail is None:
            self._before_tail = self.skipped, self.first_skip
        # a second look (a caller wanting more) reads the first one's lines again: they count once,
        # from what was counted before the first look
        skipped, first = self._before_tail
        want = n
        events: list[dict[str, Any]] = []
        fh = open_log(self.path)
        if fh is None:
            return []
        with fh:
            st = os.fstat(fh.fileno())
            end = st.st_size
            pos = end
            ends: list[int] = []  # offsets of the newlines seen, last first
            while True:
                while pos > 0 and len(ends) <= want:
                    step = min(_TAIL_CHUNK, pos)
                    pos -= step
                    fh.seek(pos)
                    chunk = fh.read(step)
                    i = len(chunk)
                    while (i := chunk.rfind(b"\n", 0, i)) != -1:
                        ends.append(pos + i)
                self.skipped, self.first_skip = skipped, first  # each look counts the same lines anew
                bounds = ends[::-1]
                # the first line is whole only when the start of the file was reached
                begin, closing = (0, bounds) if pos == 0 else ((bounds[0] + 1, bounds[1:]) if bounds else (0, []))
                events = []
                for nl in closing:
                    if nl - begin > MAX_LINE:
                        self._skip(begin, f"longer than {MAX_LINE} bytes")
                    else:
                        fh.seek(begin)
                        events += self._decode_lines([fh.read(nl - begin)], begin)
                    begin = nl + 1
                if len(events) >= n or pos == 0:
                    break
                want = len(ends) + (n - len(events)) * 2
            complete_end = ends[0] + 1 if ends else 0
            fh.seek(complete_end)
            partial = fh.read(min(end - complete_end, MAX_LINE + 1))
            self._place(fh, end, st.st_ino)
        self._partial = partial if len(partial) <= MAX_LINE else b""
        return events[-n:] if n else []

    def read_new(self) -> list[dict[str, Any]]:
        return list(self.iter_new())

    def iter_new(self) -> Iterator[dict[str, Any]]:
        """What was appended since the last read, in chunks (a large log is never read whole)."""
        fh = open_log(self.path)
        if fh is None:
            return
        with fh:
            st = os.fstat(fh.fileno())
            if not self._continues(fh, st):
                self.offset, self._partial, self._mark = 0, b"", b""
                self.restarts += 1
            self.inode = st.st_ino
            fh.seek(self.offset)
            while chunk := fh.read(_READ_CHUNK):
                base = self.offset - len(self._partial)
                self.offset += len(chunk)
                self._mark = (self._mark + chunk)[-_MARK:]
                data = self._partial + chunk
                cut = data.rfind(b"\n") + 1
                self._partial = data[cut:]
                if len(self._partial) > MAX_LINE:  # no newline in sight: not a line worth holding
                    self._skip(base + cut, f"longer than {MAX_LINE} bytes")
                    self._partial = b""
                yield from self._decode_lines(data[:cut].split(b"\n"), base)

    def _continues(self, fh: Any, st: os.stat_result) -> bool:
        """Whether the file is still the one read up to `offset` (not replaced nor rewritten)."""
        if self.inode is None or self.offset == 0:
            return True
        if st.st_ino != self.inode or st.st_size < self.offset:
            return False
        fh.seek(self.offset - len(self._mark))
        return bool(fh.read(len(self._mark)) == self._mark)

    def _decode_lines(self, lines: list[bytes], start: int) -> list[dict[str, Any]]:
        out = []
        pos = start
        for raw in lines:
            at, pos = pos, pos + len(raw) + 1
            if not raw.strip():
                continue
            if self.events_only:
                event, why = decode_event(raw)
            else:
                event, why = parse_line(raw)
                if why is None and not isinstance(event, dict):
                    event, why = None, "not a JSON object"
            if event is None:
                self._skip(at, why or "unreadable")
            else:
                out.append(event)
        return out

    def _skip(self, at: int, why: str) -> None:
        self.skipped += 1
        if self.first_skip is None:
            self.first_skip = f"the line at byte {at}: {why}"

    def skip_notice(self) -> str | None:
        """One sentence about the skipped lines, the first time there are any; None after that."""
        if not self.skipped or self._noticed:
            return None
        self._noticed = True
        return skip_notice(self.path, self.skipped, self.first_skip)


class LineTailer(EventTailer):
    """The same incremental reader for any JSON-lines file (a run's normalised stream)."""

    events_only = False


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
