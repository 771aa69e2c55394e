"""The event log's index: one job's or task's events without reading the whole log, and never a
wrong answer when the log was replaced, truncated or edited under it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pilothouse.core.state.event_index import EventIndex, EventLookup, IndexUnavailable, events_of, index_path
from pilothouse.core.state.events import EventLog


def _log(tmp_path: Path) -> tuple[Path, EventLog]:
    path = tmp_path / "runtime" / "events.jsonl"
    return path, EventLog(path, redact=lambda s: s)


def _fill(log: EventLog) -> None:
    log.append("job.created", job="j1")
    log.append("task.state", job="j1", task="a", data={"to": "running"})
    log.append("task.state", job="j2", task="a", data={"to": "running"})
    log.append("run.activity", job="j1", task="b", data={"tool": "edit"})
    log.append("supervisor.started", data={"pid": 1})
    log.append("gate.finished", job="j1", task="a", data={"passed": True})


def _seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]


def test_select_gives_the_task_or_the_job_in_log_order(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a")) == [2, 6]
        assert _seqs(index.select("j1", "a", job_level=True)) == [1, 2, 6]
        assert _seqs(index.select("j1")) == [1, 2, 4, 6]
        assert _seqs(index.select("j2", "a")) == [3]
        assert index.jobs_of("a") == ["j1", "j2"]
        assert index.jobs_of("b") == ["j1"] and index.jobs_of("zz") == []
        assert index.has_job("j2") and not index.has_job("j3")


def test_select_gives_only_the_types_asked_for(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    log.append("review.finished", job="j1", task="a", data={"overall": "PASS"})
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a", types={"gate.finished", "review.finished"})) == [6, 7]
        assert _seqs(index.select("j1", types=["run.activity"])) == [4]
        assert index.select("j1", "a", types={"merge.finished"}) == []
    index_path(path).unlink()
    index_path(path).mkdir()  # no index: the whole log is read, and the same answer comes
    with EventLookup(path) as lookup:
        assert _seqs(lookup.select("j1", "a", types={"gate.finished", "review.finished"})) == [6, 7]


def test_an_index_of_an_older_layout_is_made_again(tmp_path: Path) -> None:
    """The index is a cache: one written by an older pilothouse (no event types) is rebuilt, not read."""
    import sqlite3

    path, log = _log(tmp_path)
    _fill(log)
    old = sqlite3.connect(index_path(path))
    old.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value); INSERT INTO meta VALUES ('version', '1');"
                      "CREATE TABLE names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
                      "CREATE TABLE lines (off INTEGER PRIMARY KEY, len INTEGER NOT NULL, seq INTEGER NOT NULL,"
                      " job INTEGER, task INTEGER);"
                      "CREATE TABLE task_jobs (task INTEGER NOT NULL, job INTEGER NOT NULL, PRIMARY KEY (task, job))"
                      " WITHOUT ROWID;")
    old.execute("INSERT INTO meta VALUES ('offset', ?)", (path.stat().st_size,))  # "all read": it must not trust it
    old.commit()
    old.close()
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a", types={"gate.finished"})) == [6]
        assert _seqs(index.select("j1")) == [1, 2, 4, 6]


def test_each_line_is_read_once_and_appends_are_seen(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    with EventIndex(path) as index:
        index.catch_up()
        end = path.stat().st_size
        assert dict(index._db.execute("SELECT key, value FROM meta"))["offset"] == end
        log.append("task.state", job="j1", task="a", data={"to": "done"})
        assert _seqs(index.select("j1", "a")) == [2, 6, 7]
    # a new reader (another command) continues from where the last one ended
    with EventIndex(path) as again:
        rows = again._db.execute("SELECT count(*) FROM lines").fetchone()[0]
        assert rows == 7
        assert _seqs(again.select("j1", "a")) == [2, 6, 7]


def test_a_torn_last_line_waits_until_it_is_whole(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    line = json.dumps({"seq": 7, "ts": "2026-12-01T00:00:00.000Z", "type": "task.state", "job": "j1",
                       "task": "a", "run": None, "data": {}}).encode()
    with open(path, "ab") as fh:
        fh.write(line[:20])
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a")) == [2, 6]
        with open(path, "ab") as fh:
            fh.write(line[20:] + b"\n")
        assert _seqs(index.select("j1", "a")) == [2, 6, 7]
        assert index.skipped == 0


def test_a_replaced_log_is_indexed_from_its_start(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    with EventIndex(path) as index:
        index.catch_up()
    new = path.with_name("new.jsonl")
    EventLog(new, redact=lambda s: s).append("task.state", job="j9", task="a")
    os.replace(new, path)
    with EventIndex(path) as index:
        assert index.jobs_of("a") == ["j9"]
        assert index.select("j1") == []


def test_a_truncated_log_is_indexed_from_its_start(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    with EventIndex(path) as index:
        index.catch_up()
    with open(path, "r+b") as fh:
        fh.truncate(0)
    log.append("task.state", job="j5", task="c")
    with EventIndex(path) as index:
        assert index.jobs_of("a") == [] and index.jobs_of("c") == ["j5"]


def test_a_log_rewritten_in_place_never_answers_with_another_event(tmp_path: Path) -> None:
    """Same inode, same size, the bytes at the end unchanged: only the lines read through the index
    can tell. A line that is no longer the event indexed there makes the index start again."""
    path, log = _log(tmp_path)
    _fill(log)
    with EventIndex(path) as index:
        index.catch_up()
    raw = path.read_bytes()
    # j1/a's first event now says j3 (same length: the offsets all still fit)
    edited = raw.replace(b'"seq":2,', b'"seq":2,', 1).replace(b'"job":"j1","task":"a"', b'"job":"j3","task":"a"', 1)
    assert len(edited) == len(raw) and edited != raw
    with open(path, "r+b") as fh:
        fh.write(edited)
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a")) == [6]
        assert index.jobs_of("a") == ["j1", "j2", "j3"]


def test_lines_that_are_not_events_are_counted_once_and_never_returned(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    log.append("task.state", job="j1", task="a")
    with open(path, "ab") as fh:
        fh.write(b'{"seq": "x", "job": "j1", "task": "a"}\nnot json at all\n')
    log.append("task.state", job="j1", task="a")
    with EventIndex(path) as index:
        assert _seqs(index.select("j1", "a")) == [1, 2]
        assert index.skipped == 2
        assert "skipped 2 lines that are not events" in (index.skip_notice() or "")
    with EventIndex(path) as again:
        again.catch_up()
        assert again.skipped == 2  # the count is kept with the offset, not found again


def test_without_a_writable_index_the_log_is_read_whole(tmp_path: Path) -> None:
    path, log = _log(tmp_path)
    _fill(log)
    index_path(path).mkdir()  # no database can be made there
    with pytest.raises(IndexUnavailable):
        EventIndex(path)
    with EventLookup(path) as lookup:
        assert _seqs(lookup.select("j1", "a", job_level=True)) == [1, 2, 6]
        assert lookup.jobs_of("a") == ["j1", "j2"] and lookup.has_job("j2")
    assert _seqs(events_of(path, "j2")) == [3]


def test_a_missing_log_has_no_events(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "events.jsonl"
    # where nothing was ever logged, a reader's index would be the first file made there: none is
    with pytest.raises(IndexUnavailable):
        EventIndex(path)
    assert not path.parent.exists()
    path.parent.mkdir()
    with EventIndex(path) as index:
        assert index.select("j1") == [] and index.jobs_of("a") == []
