"""A derived index of the event log: where each event of a job and task starts in events.jsonl.

`why`, `events`, the MCP tools and the supervisor's start read one task's or one job's events; a log
of ten million lines must not be parsed whole for that (it took 28 s and 1.4 GB at one million).
The index lives beside the log (`events.index.db`, SQLite WAL) and holds, per event line, its byte
offset and length, its seq, and small integer ids for its job, task and type (the cockpit's run detail
asks for one task's gate and review events among thousands of its activity lines). It is a cache, never a
record: any reader brings it up to date from the offset it reached (so each line is parsed once in
the index's life), and it starts again from byte 0 when the log was replaced, truncated or
rewritten before that offset (the same test EventTailer uses: the bytes just before the offset).

The log is anyone's to edit, so nothing read through the index is trusted either: each line is
decoded and checked again (`decode_event`), and a line that no longer is the event the index
recorded there makes the index start again (once) instead of answering wrongly. Where the index
cannot be written (a read-only runtime folder), readers fall back to reading the whole log.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from pilothouse.core.state.events import MAX_LINE, EventTailer, decode_event
from pilothouse.core.state.log_faults import open_log, skip_notice
from pilothouse.providers.fsutil import use_wal

_MARK = 256
_READ_CHUNK = 1 << 20
_BATCH = 50_000  # lines per transaction while catching up: other readers get the lock between batches

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS lines (
  off INTEGER PRIMARY KEY,          -- byte offset of the line in events.jsonl
  len INTEGER NOT NULL,             -- its length without the newline
  seq INTEGER NOT NULL,
  job INTEGER,                      -- names.id, NULL for an event of no job
  task INTEGER,                     -- names.id, NULL for an event of no task
  type INTEGER                      -- names.id of the event's type
);
CREATE INDEX IF NOT EXISTS lines_owner ON lines (job, task, type);
-- a job's lines in log order (an index entry ends with the rowid, the offset): a replay finds the
-- line at a moment by bisecting over them, and its last lines before it, without reading the rest
CREATE INDEX IF NOT EXISTS lines_job ON lines (job);
-- a job's lines of some types (the timeline's 1 % of a big log): found by type, then sorted, instead
-- of walking every line of the job in order (made on the first open of an older index, once)
CREATE INDEX IF NOT EXISTS lines_type ON lines (job, type);
CREATE TABLE IF NOT EXISTS task_jobs (task INTEGER NOT NULL, job INTEGER NOT NULL, PRIMARY KEY (task, job))
  WITHOUT ROWID;
"""
_VERSION = "2"


class IndexUnavailable(Exception):
    """The index cannot be opened or written here; the caller reads the log instead."""


def index_path(events: Path) -> Path:
    return events.with_name(events.name.removesuffix(".jsonl") + ".index.db")


class EventIndex:
    """Offsets of the events of `events` (an events.jsonl) by job and task."""

    def __init__(self, events: Path) -> None:
        self.events = Path(events)
        self.path = index_path(self.events)
        self.skipped = 0
        self.first_skip: str | None = None
        self._names: dict[str, int] = {}
        if not self.events.parent.is_dir():
            # nothing was ever logged here: an index would be the first file a reader created
            raise IndexUnavailable(f"{self.events.parent} does not exist")
        try:
            self._db = sqlite3.connect(self.path, timeout=120, isolation_level=None)
            use_wal(self._db)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
            if self._version() not in (None, _VERSION):
                # another layout (a cache: made again from the log, never migrated); asked again once
                # the lock is held, so a reader that got there first is not undone
                self._begin()
                if self._version() not in (None, _VERSION):
                    for table in ("lines", "task_jobs", "names"):
                        self._db.execute(f"DROP TABLE IF EXISTS {table}")
                    self._db.execute("DELETE FROM meta")
                self._db.execute("COMMIT")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (_VERSION,))
        except (OSError, sqlite3.Error) as exc:
            raise IndexUnavailable(f"{self.path}: {exc}") from None

    def _version(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EventIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ keeping up with the log

    def catch_up(self) -> None:
        """Index what was appended since the last reader; start again if the log is not the one indexed."""
        try:
            self._catch_up()
        except sqlite3.Error as exc:
            raise IndexUnavailable(f"{self.path}: {exc}") from None

    def _catch_up(self) -> None:
        self._names.clear()  # another reader may have started the index again since
        fh = open_log(self.events)
        if fh is None:
            if self._db.execute("SELECT 1 FROM meta WHERE key='offset'").fetchone() is not None:
                self._begin()  # the log that was indexed is gone: so is what the index says of it
                self._reset()
                self._db.execute("COMMIT")
            return
        with fh:
            self._begin()
            try:
                meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
                st = os.fstat(fh.fileno())
                offset = int(meta.get("offset") or 0)
                if offset and not _continues(fh, st, meta, offset):
                    self._reset()
                    offset, meta = 0, {}
                self.skipped = int(meta.get("skipped") or 0)
                self.first_skip = meta.get("first_skip")
                fh.seek(offset)
                self._index_from(fh, offset, st.st_ino)
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _index_from(self, fh: Any, offset: int, inode: int) -> None:
        rows: list[tuple[int, int, int, int | None, int | None, int | None]] = []
        pairs: set[tuple[int, int]] = set()
        base, partial = offset, b""
        while chunk := fh.read(_READ_CHUNK):
            data = partial + chunk
            cut = data.rfind(b"\n") + 1
            pos = base
            for raw in data[:cut].split(b"\n")[:-1]:
                at, pos = pos, pos + len(raw) + 1
                if not raw.strip():
                    continue
                event, why = decode_event(raw)
                if event is None:
                    self._skip(at, why or "unreadable")
                    continue
                job, task = self._id(event.get("job")), self._id(event.get("task"))
                rows.append((at, len(raw), int(event["seq"]), job, task, self._id(str(event["type"]))))
                if job is not None and task is not None:
                    pairs.add((task, job))
            base, partial = base + cut, data[cut:]
            if len(partial) > MAX_LINE:  # no newline in sight: not a line worth holding (as EventTailer)
                self._skip(base, f"longer than {MAX_LINE} bytes")
                base, partial = base + len(partial), b""
            if len(rows) >= _BATCH:
                self._flush(rows, pairs, fh, base, inode)
                self._db.execute("COMMIT")
                self._begin()
        self._flush(rows, pairs, fh, base, inode)

    def _flush(self, rows: list[Any], pairs: set[tuple[int, int]], fh: Any, end: int, inode: int) -> None:
        self._db.executemany("INSERT OR REPLACE INTO lines VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._db.executemany("INSERT OR IGNORE INTO task_jobs VALUES (?, ?)", pairs)
        rows.clear()
        pairs.clear()
        here = fh.tell()
        fh.seek(max(0, end - _MARK))
        mark = fh.read(end - max(0, end - _MARK))
        fh.seek(here)
        self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             [("offset", end), ("inode", inode), ("mark", mark),
                              ("skipped", self.skipped), ("first_skip", self.first_skip)])

    def _begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")  # one indexer at a time; the next continues where it ended

    def _reset(self) -> None:
        self._db.execute("DELETE FROM lines")
        self._db.execute("DELETE FROM task_jobs")
        self._db.execute("DELETE FROM names")
        self._db.execute("DELETE FROM meta WHERE key != 'version'")
        self._names.clear()
        self.skipped, self.first_skip = 0, None

    def _id(self, name: str | None) -> int | None:
        if name is None:
            return None
        found = self._names.get(name)
        if found is None:
            row = self._db.execute("SELECT id FROM names WHERE name=?", (name,)).fetchone()
            found = row[0] if row else self._db.execute("INSERT INTO names (name) VALUES (?)", (name,)).lastrowid
            assert found is not None
            self._names[name] = found
        return found

    def _skip(self, at: int, why: str) -> None:
        self.skipped += 1
        if self.first_skip is None:
            self.first_skip = f"the line at byte {at}: {why}"

    def skip_notice(self) -> str | None:
        """The same sentence EventTailer says about the lines that are not events, or None."""
        return skip_notice(self.events, self.skipped, self.first_skip) if self.skipped else None

    # ------------------------------------------------------------ reading

    def jobs_of(self, task: str) -> list[str]:
        """The jobs that have events of a task named `task`."""
        self.catch_up()
        return [r[0] for r in self._db.execute(
            "SELECT n.name FROM task_jobs t JOIN names n ON n.id = t.job WHERE t.task = "
            "(SELECT id FROM names WHERE name=?) ORDER BY n.name", (task,))]

    def has_job(self, job: str) -> bool:
        self.catch_up()
        return self._db.execute("SELECT 1 FROM lines WHERE job=(SELECT id FROM names WHERE name=?) LIMIT 1",
                                (job,)).fetchone() is not None

    def select(self, job: str, task: str | None = None, *, job_level: bool = False,
               types: Collection[str] | None = None) -> list[dict[str, Any]]:
        """The job's events in log order: all of them (task None), or the task's, plus the job's own
        (those of no task) with `job_level`; only those of `types` when given."""
        for attempt in (1, 2):
            self.catch_up()
            if task is None:
                where, args = "job = (SELECT id FROM names WHERE name=?)", [job]
            else:
                where = "job = (SELECT id FROM names WHERE name=?) AND (task = (SELECT id FROM names WHERE name=?)"
                where += " OR task IS NULL)" if job_level else ")"
                args = [job, task]
            if types is not None:
                clause, kinds = _of_types(types)
                where += clause
                args += kinds
            spots = self._db.execute(f"SELECT off, len, seq FROM lines WHERE {where}{_order(types)}", args).fetchall()
            events = self._read(spots, job, task, job_level, types)
            if events is not None:
                return events
            if attempt == 1:  # the log was rewritten under the index: start again, once
                self._restart()
        raise IndexUnavailable(f"{self.events} changes faster than it can be indexed")

    def select_after(self, job: str, after: int, types: Collection[str] | None = None
                     ) -> list[tuple[int, dict[str, Any]]]:
        """The job's events (of `types`) on lines past byte `after`, each with its line's offset: a
        reader that keeps the last offset it saw reads only what was appended since."""
        for attempt in (1, 2):
            self.catch_up()
            where, args = "job = (SELECT id FROM names WHERE name=?) AND off > ?", [job, after]
            if types is not None:
                clause, kinds = _of_types(types)
                where += clause
                args += kinds
            spots = self._db.execute(f"SELECT off, len, seq FROM lines WHERE {where}{_order(types)}", args).fetchall()
            events = self._read(spots, job, None, False, types)
            if events is not None:
                return [(spot[0], ev) for spot, ev in zip(spots, events, strict=True)]
            if attempt == 1:
                self._restart()
        raise IndexUnavailable(f"{self.events} changes faster than it can be indexed")

    def bounds(self, job: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The job's first and last events (any type), or (None, None)."""
        for attempt in (1, 2):
            self.catch_up()
            ends = []
            for order in ("ASC", "DESC"):
                spot = self._db.execute(f"SELECT off, len, seq FROM lines WHERE job = (SELECT id FROM names WHERE "
                                        f"name=?) ORDER BY off {order} LIMIT 1", (job,)).fetchone()
                ends.append(spot)
            if ends[0] is None:
                return None, None
            events = self._read(ends, job, None, False, None)
            if events is not None:
                return events[0], events[1]
            if attempt == 1:
                self._restart()
        raise IndexUnavailable(f"{self.events} changes faster than it can be indexed")

    def until(self, job: str, t: float, last: int) -> list[dict[str, Any]]:
        """The job's last `last` events (any type) stamped at or before `t` (a POSIX time), in log order.

        The log is written in time order, so the first line past `t` is found by bisecting over the
        job's lines by offset (each step one indexed look-up and one line read): a moment in a log
        of millions of lines costs some thirty line reads, then the lines before it are read by
        offset, backwards."""
        for attempt in (1, 2):
            self.catch_up()
            row = self._db.execute("SELECT id FROM names WHERE name=?", (job,)).fetchone()
            if row is None:
                return []
            events = self._until(row[0], job, t, last)
            if events is not None:
                return events
            if attempt == 1:
                self._restart()
        raise IndexUnavailable(f"{self.events} changes faster than it can be indexed")

    def _until(self, job_id: int, job: str, t: float, last: int) -> list[dict[str, Any]] | None:
        lo, hi = 0, int(self._db.execute("SELECT value FROM meta WHERE key='offset'").fetchone()[0]) + 1
        while lo < hi:  # the smallest offset whose next line of the job is later than t (or none)
            mid = (lo + hi) // 2
            spot = self._db.execute("SELECT off, len, seq FROM lines WHERE job=? AND off>=? ORDER BY off LIMIT 1",
                                    (job_id, mid)).fetchone()
            if spot is None:
                hi = mid
                continue
            found = self._read([spot], job, None, False, None)
            if found is None:
                return None
            stamp = _stamp(found[0].get("ts"))
            if stamp is not None and stamp > t:
                hi = mid
            else:
                lo = spot[0] + 1
        spots = self._db.execute("SELECT off, len, seq FROM lines WHERE job=? AND off<? ORDER BY off DESC LIMIT ?",
                                 (job_id, lo, max(0, last))).fetchall()
        return self._read(spots[::-1], job, None, False, None)

    def _restart(self) -> None:
        """The log was rewritten under the index: start it again (each reader does so once)."""
        self._begin()
        self._reset()
        self._db.execute("COMMIT")

    def _read(self, spots: Iterable[tuple[int, int, int]], job: str, task: str | None,
              job_level: bool, types: Collection[str] | None) -> list[dict[str, Any]] | None:
        out = []
        fh = open_log(self.events)
        if fh is None:
            return []
        with fh:
            for off, length, seq in spots:
                event, _ = decode_event(os.pread(fh.fileno(), length, off))
                if (event is None or event["seq"] != seq or event.get("job") != job
                        or (types is not None and event["type"] not in types)
                        or (task is not None and event.get("task") != task
                            and not (job_level and event.get("task") is None))):
                    return None
                out.append(event)
        return out


def _stamp(value: object) -> float | None:
    from pilothouse.core.state.events import event_seconds

    return event_seconds(value)


def _continues(fh: Any, st: os.stat_result, meta: dict[str, Any], offset: int) -> bool:
    """Whether the log is still the one indexed up to `offset` (as EventTailer._continues)."""
    if str(meta.get("inode")) != str(st.st_ino) or st.st_size < offset:
        return False
    mark = meta.get("mark") or b""
    fh.seek(offset - len(mark))
    return bool(fh.read(len(mark)) == mark)


class EventLookup:
    """One job's or task's events: through the index, or from the whole log where the index can't be
    kept (then the log is read once, here, and every question is answered from that reading)."""

    def __init__(self, events: Path) -> None:
        self._events = Path(events)
        self._index: EventIndex | None = None
        self._all: list[dict[str, Any]] | None = None
        self._tailer = EventTailer(self._events)
        try:
            self._index = EventIndex(events)
            self._index.catch_up()
        except IndexUnavailable:
            if self._index is not None:
                self._index.close()
            self._index = None
            self._all = self._tailer.read_new()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def __enter__(self) -> EventLookup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def skip_notice(self) -> str | None:
        return self._index.skip_notice() if self._index is not None else self._tailer.skip_notice()

    def jobs_of(self, task: str) -> list[str]:
        if self._index is not None:
            return self._index.jobs_of(task)
        return sorted({str(e["job"]) for e in self._all or [] if e.get("task") == task and e.get("job")})

    def has_job(self, job: str) -> bool:
        if self._index is not None:
            return self._index.has_job(job)
        return any(e.get("job") == job for e in self._all or [])

    def select(self, job: str, task: str | None = None, *, job_level: bool = False,
               types: Collection[str] | None = None) -> list[dict[str, Any]]:
        if self._index is not None:
            try:
                return self._index.select(job, task, job_level=job_level, types=types)
            except IndexUnavailable:
                pass
        every = self._all if self._all is not None else EventTailer(self._events).read_new()
        return [e for e in every if e.get("job") == job and (types is None or e["type"] in types) and (
            task is None or e.get("task") == task or (job_level and e.get("task") is None))]

    # the answers below come from the index, or else from the one reading of the whole log, where a
    # line's "offset" is its place in that reading (the same in the next reading of a log that grows)

    def select_after(self, job: str, after: int, types: Collection[str] | None = None
                     ) -> list[tuple[int, dict[str, Any]]]:
        if self._index is not None:
            try:
                return self._index.select_after(job, after, types)
            except IndexUnavailable:
                pass
        every = self._all if self._all is not None else EventTailer(self._events).read_new()
        return [(n, e) for n, e in enumerate(every)
                if n > after and e.get("job") == job and (types is None or e["type"] in types)]

    def bounds(self, job: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        if self._index is not None:
            try:
                return self._index.bounds(job)
            except IndexUnavailable:
                pass
        mine = self._mine(job)
        return (mine[0], mine[-1]) if mine else (None, None)

    def until(self, job: str, t: float, last: int) -> list[dict[str, Any]]:
        if self._index is not None:
            try:
                return self._index.until(job, t, last)
            except IndexUnavailable:
                pass
        upto = [e for e in self._mine(job) if (_stamp(e.get("ts")) or 0.0) <= t]
        return upto[-last:] if last > 0 else []

    def _mine(self, job: str) -> list[dict[str, Any]]:
        every = self._all if self._all is not None else EventTailer(self._events).read_new()
        return [e for e in every if e.get("job") == job]

    @property
    def indexed(self) -> bool:
        """Whether answers come from the index (offsets are bytes) or from one reading of the log."""
        return self._index is not None


def events_of(events: Path, job: str, task: str | None = None, *, job_level: bool = False) -> list[dict[str, Any]]:
    """The job's (or the task's) events, through the index where it can be kept."""
    with EventLookup(events) as lookup:
        return lookup.select(job, task, job_level=job_level)


def _of_types(types: Collection[str]) -> tuple[str, list[str]]:
    """The WHERE clause (and its arguments) that keeps lines of these event types only."""
    kinds = sorted(types)
    return f" AND type IN (SELECT id FROM names WHERE name IN ({','.join('?' * len(kinds))}))", kinds


def _order(types: Collection[str] | None) -> str:
    """Log order. With types, `+off` keeps SQLite from walking the job's lines in order (lines_job) to
    spare a sort: it finds the few lines of those types through lines_type and sorts them (on a
    million-line job, 20 ms instead of 800)."""
    return " ORDER BY off" if types is None else " ORDER BY +off"
