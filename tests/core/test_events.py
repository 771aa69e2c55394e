"""The event log contract (docs/contracts.md, "The event log"): strictly increasing seq across processes, torn lines,
truncation and replacement handled by the tailer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pilothouse.core.state.events import EventLog, EventTailer, follow
from support import guard, until


def test_append_assigns_increasing_seq_and_fields(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    a = log.append("job.created", job="j1", data={"revision": 1})
    b = log.append("task.state", job="j1", task="t1", data={"state": "ready"})
    assert (a["seq"], b["seq"]) == (1, 2)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["job.created", "task.state"]
    assert json.loads(lines[1])["ts"].endswith("Z")


def test_seq_strictly_increasing_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    code = (
        "import sys\nfrom pathlib import Path\nfrom pilothouse.core.state.events import EventLog\n"
        "log = EventLog(Path(sys.argv[1]))\n"
        "for i in range(50):\n    log.append('run.activity', data={'i': i})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)]) for _ in range(4)]
    assert all(p.wait(timeout=guard(60)) == 0 for p in procs)
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == list(range(1, 201))


def test_torn_last_line_is_buffered_until_complete(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append("job.created", job="j")
    tailer = EventTailer(path)
    assert [e["seq"] for e in tailer.read_new()] == [1]
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 2, "ts": "x", "type": "job.started", "jo')
    assert tailer.read_new() == []
    with open(path, "ab") as fh:
        fh.write(b'b": "j", "data": {}}\n')
    assert [e["type"] for e in tailer.read_new()] == ["job.started"]


def test_writer_after_a_torn_line_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append("job.created")
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 2, "broken')
    event = log.append("job.started")
    assert event["seq"] == 2  # the torn line has no readable seq
    assert [e["type"] for e in EventTailer(path).read_new()] == ["job.created", "job.started"]


def test_truncation_and_replacement_restart_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for _ in range(3):
        log.append("run.activity")
    tailer = EventTailer(path)
    assert len(tailer.read_new()) == 3
    path.write_text("")  # truncated
    log.append("job.created")
    assert [e["type"] for e in tailer.read_new()] == ["job.created"]
    replacement = tmp_path / "new.jsonl"
    EventLog(replacement).append("job.accepted")
    os.replace(replacement, path)  # replaced: new inode
    assert [e["type"] for e in tailer.read_new()] == ["job.accepted"]


def test_unknown_and_garbage_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('not json\n{"seq": 1, "type": "future.thing", "data": {}}\n[1,2]\n')
    events = EventTailer(path).read_new()
    assert [e["type"] for e in events] == ["future.thing"]


def test_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with open(path, "w") as fh:
        for i in range(1, 20001):
            fh.write(json.dumps({"seq": i, "type": "run.activity", "data": {}}) + "\n")
    tailer = EventTailer(path)
    last = tailer.tail(5)
    assert [e["seq"] for e in last] == [19996, 19997, 19998, 19999, 20000]
    EventLog(path).append("job.accepted")
    assert [e["seq"] for e in tailer.read_new()] == [20001]


def test_redaction_applies_to_every_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, redact=lambda s: s.replace("hunter2secret", "[REDACTED]"))
    log.append("run.finished", data={"stderr": "key=hunter2secret"})
    assert "hunter2secret" not in path.read_text()


def test_follow_wakes_on_append_from_another_process(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "events.jsonl"
    EventLog(path).append("job.created")
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for event in follow(path, stop_event=done):
            seen.append(event["type"])
            if event["type"] == "job.accepted":
                done.set()
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    code = ("import sys\nfrom pathlib import Path\nfrom pilothouse.core.state.events import EventLog\n"
            "EventLog(Path(sys.argv[1])).append('job.accepted')\n")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    t.join(timeout=guard(20))
    assert seen == ["job.created", "job.accepted"]


def test_follow_from_a_placed_tailer_ends_on_its_stop_event(tmp_path: Path) -> None:
    """`run --watch` places the tailer before the supervisor starts: its first events are kept,
    and setting the stop event ends the following with everything written until then."""
    path = tmp_path / "runtime" / "events.jsonl"
    EventLog(path).append("job.created")  # before: not shown
    tailer = EventTailer(path, start_at_end=True)
    EventLog(path).append("supervisor.started")
    EventLog(path).append("supervisor.stopped")
    done = threading.Event()
    done.set()
    assert [e["type"] for e in follow(path, stop_event=done, tailer=tailer)] == ["supervisor.started",
                                                                                "supervisor.stopped"]


def test_a_change_committed_with_its_event_is_logged_before_any_reaction(tmp_path: Path) -> None:
    """The supervisor may act the moment an operator's reply is committed: whatever it logs about
    that must come after the answer's own line, so the reply is committed under the log's lock."""
    log = EventLog(tmp_path / "events.jsonl")
    reacted: list[dict] = []

    def commit() -> None:
        # another writer (its own EventLog, as another process would have) reacts to the change now
        other = threading.Thread(target=lambda: reacted.append(EventLog(log.path).append("problem.closed")))
        other.start()
        other.join(timeout=0.2)
        assert other.is_alive()  # it waits for the lock we hold
        commit.thread = other  # type: ignore[attr-defined]

    answered = log.append("problem.answered", commit=commit)
    commit.thread.join(timeout=guard(10))  # type: ignore[attr-defined]
    assert reacted and reacted[0]["seq"] == answered["seq"] + 1

    def failing() -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        log.append("problem.answered", commit=failing)
    assert [e["type"] for e in map(json.loads, log.path.read_text().splitlines())] == \
        ["problem.answered", "problem.closed"]  # a change that failed leaves no line


HOSTILE = [
    b"not json",
    b'{"seq": Infinity, "type": "job.created"}',
    b'{"seq": NaN, "type": "job.created"}',
    b'{"seq": "7", "type": "job.created"}',
    b'{"seq": true, "type": "job.created"}',
    b'{"seq": 0, "type": "job.created"}',
    b'{"seq": 99999999999999999999999, "type": "job.created"}',
    b'{"seq": 3, "type": "task.state", "job": ["a", "list"]}',
    b'{"seq": 3, "type": "task.state", "task": {"a": "dict"}}',
    b'{"seq": 3, "type": "task.state", "ts": 1700000000}',
    b'{"seq": 3, "type": "task.state", "data": [1, 2]}',
    b'{"seq": 3, "type": 5}',
    b'{"seq": 3}',
    b"[" * 200_000 + b"]" * 200_000,
    b"\xff\xfe not utf-8",
    b"1" * 5000,
]


def test_lines_that_are_not_events_are_skipped_counted_and_said_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventLog(path).append("job.created", job="j")
    with open(path, "ab") as fh:
        fh.write(b"\n".join(HOSTILE) + b"\n")
    EventLog(path).append("job.accepted", job="j")
    tailer = EventTailer(path)
    assert [e["type"] for e in tailer.read_new()] == ["job.created", "job.accepted"]
    assert tailer.skipped == len(HOSTILE)
    notice = tailer.skip_notice()
    assert notice is not None and f"skipped {len(HOSTILE)} lines" in notice and "byte" in notice
    assert tailer.skip_notice() is None  # said once
    back = EventTailer(path)
    assert [e["type"] for e in back.tail(50)] == ["job.created", "job.accepted"]
    assert back.skipped == len(HOSTILE)


@pytest.mark.parametrize("last", HOSTILE[1:13])
def test_a_hostile_last_line_never_stops_the_writer(tmp_path: Path, last: bytes) -> None:
    path = tmp_path / "events.jsonl"
    EventLog(path).append("job.created")
    with open(path, "ab") as fh:
        fh.write(last + b"\n")
    assert EventLog(path).append("job.started")["seq"] == 2  # counted on from the last real event
    assert [e["seq"] for e in EventTailer(path).read_new()] == [1, 2]


def test_a_log_rewritten_past_the_old_offset_is_read_from_its_new_start(tmp_path: Path) -> None:
    """Truncated and written again before the reader looked: same inode, larger than what was read,
    seq restarting at 1. The reader notices the bytes it read are gone and starts over."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for _ in range(3):
        log.append("run.activity")
    tailer = EventTailer(path)
    assert len(tailer.read_new()) == 3
    inode = path.stat().st_ino
    with open(path, "r+b") as fh:
        fh.truncate(0)
    for _ in range(6):
        log.append("task.state", job="again")
    assert path.stat().st_ino == inode
    got = tailer.read_new()
    assert [e["seq"] for e in got] == [1, 2, 3, 4, 5, 6] and tailer.restarts == 1
    log.append("job.accepted")
    assert [e["seq"] for e in tailer.read_new()] == [7] and tailer.restarts == 1


def test_a_monster_line_without_newline_is_not_held(tmp_path: Path) -> None:
    from pilothouse.core.state.events import MAX_LINE

    path = tmp_path / "events.jsonl"
    path.write_bytes(b"x" * (MAX_LINE * 2 + 10))
    tailer = EventTailer(path)
    assert tailer.read_new() == [] and tailer.skipped >= 1
    assert len(tailer._partial) <= MAX_LINE
    EventLog(path).append("job.created")
    assert [e["type"] for e in tailer.read_new()] == ["job.created"]


def test_timestamps_are_utc_with_milliseconds() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from pilothouse.core.state.events import parse_ts, utc_now_iso

    plus2 = timezone(timedelta(hours=2))
    assert utc_now_iso(datetime(2026, 11, 29, 8, 1, 2, 345678, tzinfo=plus2)) == "2026-11-29T06:01:02.345Z"
    assert utc_now_iso(datetime(2026, 11, 29, 8, 1, 2, 999, tzinfo=UTC)) == "2026-11-29T08:01:02.000Z"
    assert parse_ts("2026-11-29T06:01:02.345Z") == datetime(2026, 11, 29, 6, 1, 2, 345000, tzinfo=UTC)
    assert parse_ts("2026-11-29T09:00:00+02:00") == datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
    naive = parse_ts("2026-11-29T07:00:00")
    assert naive == datetime(2026, 11, 29, 7, 0, tzinfo=UTC) and naive.tzinfo is UTC
    assert (parse_ts(None), parse_ts(""), parse_ts("yesterday")) == (None, None, None)
    # a damaged line's time that its zone moves out of the years a datetime holds: unreadable, not a crash
    assert parse_ts("9999-12-31T23:00:00-05:00") is None and parse_ts("0001-01-01T00:00:00+01:00") is None


def test_an_event_is_one_compact_line_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    event = EventLog(path, redact=lambda s: s).append("run.started", job="j", task="t", run="r")
    assert list(event) == ["seq", "ts", "type", "job", "task", "run", "data"]
    assert path.read_text() == (f'{{"seq":1,"ts":"{event["ts"]}","type":"run.started","job":"j","task":"t",'
                                '"run":"r","data":{}}\n')


def test_seq_continues_past_a_long_unreadable_tail(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventLog(path).append("job.created")
    EventLog(path).append("job.started")
    with open(path, "a") as fh:  # more than one read-back chunk (64 KiB) of lines without a seq
        for i in range(3000):
            fh.write(json.dumps({"type": "no.seq", "pad": "x" * 30, "i": i}) + "\n")
        fh.write('{"seq": "not a number", "type": "bad"}\n\n')
    assert path.stat().st_size > 2 * 64 * 1024
    assert EventLog(path).append("job.accepted")["seq"] == 3


def test_tail_and_read_new_on_edge_cases(tmp_path: Path) -> None:
    from pilothouse.core.state.events import LineTailer

    path = tmp_path / "events.jsonl"
    assert EventTailer(path).tail(3) == [] and EventTailer(path).read_new() == []
    log = EventLog(path)
    for _ in range(3):
        log.append("run.activity")
    assert EventTailer(path).tail(0) == []
    assert [e["seq"] for e in EventTailer(path).tail(10)] == [1, 2, 3]  # fewer than asked: all of them
    at_end = EventTailer(path, start_at_end=True)
    assert at_end.read_new() == []
    log.append("job.accepted")
    assert [e["seq"] for e in at_end.read_new()] == [4]
    with open(path, "a") as fh:
        fh.write('{"kind": "text", "text": "hi"}\n')
    assert EventTailer(path).read_new()[-1]["type"] == "job.accepted"  # not an event: skipped
    assert LineTailer(path).read_new()[-1] == {"kind": "text", "text": "hi"}  # any JSON object


def test_a_reader_that_starts_on_a_torn_line_gets_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    torn, rest = b'{"seq": 1, "ts": "x", "type": "job.cre', b'ated", "data": {}}\n'
    path.write_bytes(torn)
    reader, tail_reader = EventTailer(path), EventTailer(path)
    assert reader.read_new() == [] and tail_reader.tail(5) == []
    with open(path, "ab") as fh:
        fh.write(rest)
    assert [e["type"] for e in reader.read_new()] == ["job.created"]
    assert [e["type"] for e in tail_reader.read_new()] == ["job.created"]


def test_seq_is_found_on_a_first_line_that_starts_one_byte_before_the_last_read_back(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = b'{"seq": 7, "type": "job.created"}\n'
    size = 2 * 64 * 1024 + 1  # read back in two 64 KiB chunks, then the file's first byte
    path.write_bytes(first + b"x" * (size - len(first) - 1) + b"\n")
    assert EventLog(path).append("job.started")["seq"] == 8


def test_a_line_cut_at_a_read_back_chunk_is_never_taken_for_a_whole_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    # the last 64 KiB start inside a line whose end alone would read as an event with seq 999
    tail = b'{"seq": 999}\n'
    filler = b"y" * (64 * 1024 - len(tail) - 1) + b"\n"
    path.write_bytes(b'{"seq": 1, "type": "job.created"}\n' + b"garbage " + tail + filler)
    assert EventLog(path).append("job.started")["seq"] == 2


def test_follow_goes_on_after_another_file_in_its_directory_changes(tmp_path: Path) -> None:
    import time

    path = tmp_path / "runtime" / "events.jsonl"
    EventLog(path).append("job.created")
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for event in follow(path, stop_event=done):
            seen.append(event["type"])
            if event["type"] == "job.accepted":
                done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    until(lambda: seen, "follow yielded the first event", every=0.02)
    (path.parent / "state.db-wal").write_text("another file of the runtime dir")
    time.sleep(1.0)  # let the watcher report that change on its own, before ours
    assert t.is_alive()
    EventLog(path).append("job.accepted")
    t.join(timeout=guard(20))
    assert seen == ["job.created", "job.accepted"]


def test_tail_returns_as_many_events_as_asked_even_when_lines_are_long(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for i in range(3):  # ~50 KiB each: the last 64 KiB read back hold one whole line and a part
        log.append("run.finished", data={"i": i, "stderr_tail": "e" * 50_000})
    assert [e["data"]["i"] for e in EventTailer(path).tail(2)] == [1, 2]
    assert [e["data"]["i"] for e in EventTailer(path).tail(1)] == [2]


def test_follow_from_the_end_or_the_last_few(tmp_path: Path) -> None:
    path = tmp_path / "runtime" / "events.jsonl"
    for kind in ("job.created", "job.started", "task.state"):
        EventLog(path).append(kind)
    done = threading.Event()
    done.set()  # stopped: only what is there now
    assert list(follow(path, stop_event=done, from_start=False)) == []
    assert [e["type"] for e in follow(path, stop_event=done, from_start=False, last=2)] == ["job.started",
                                                                                          "task.state"]
    assert [e["seq"] for e in follow(path, stop_event=done)] == [1, 2, 3]


def test_milliseconds_are_truncated_not_rounded() -> None:
    from datetime import UTC, datetime

    from pilothouse.core.state.events import utc_now_iso

    assert utc_now_iso(datetime(2026, 11, 29, 8, 0, 0, 999000, tzinfo=UTC)) == "2026-11-29T08:00:00.999Z"
    assert utc_now_iso(datetime(2026, 11, 29, 8, 0, 0, 1999, tzinfo=UTC)) == "2026-11-29T08:00:00.001Z"


def test_the_log_makes_its_directories_and_a_tailer_waits_for_its_file(tmp_path: Path) -> None:
    path = tmp_path / "repo" / ".ai" / "runtime" / "events.jsonl"
    waiting = EventTailer(path, start_at_end=True)  # no file yet: not an error
    EventLog(path).append("job.created")
    assert [e["type"] for e in waiting.read_new()] == ["job.created"]


def test_an_event_after_a_one_byte_torn_line_starts_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"{")
    EventLog(path).append("job.created")
    assert path.read_bytes().startswith(b"{\n{")
    assert [e["type"] for e in EventTailer(path).read_new()] == ["job.created"]


def test_follow_makes_the_directory_it_watches(tmp_path: Path) -> None:
    path = tmp_path / "repo" / ".ai" / "runtime" / "events.jsonl"
    done = threading.Event()
    done.set()
    assert list(follow(path, stop_event=done)) == [] and path.parent.is_dir()


def test_a_replacement_with_a_lower_inode_is_read_from_its_start(tmp_path: Path) -> None:
    replacement = tmp_path / "new.jsonl"  # made first: the lower inode number
    replacement.write_text("")
    path = tmp_path / "events.jsonl"
    EventLog(path).append("job.created")
    tailer = EventTailer(path)
    assert [e["type"] for e in tailer.read_new()] == ["job.created"]
    for kind in ("job.accepted", "job.started", "task.state"):  # longer than what was read
        EventLog(replacement).append(kind)
    assert replacement.stat().st_ino < path.stat().st_ino  # the arrangement this test needs
    os.replace(replacement, path)
    assert [e["type"] for e in tailer.read_new()] == ["job.accepted", "job.started", "task.state"]


def test_an_event_after_a_torn_line_ending_in_a_control_byte_starts_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"seq": 1, "ty\t')
    EventLog(path).append("job.created")
    assert [e["type"] for e in EventTailer(path).read_new()] == ["job.created"]


def test_a_monster_line_is_skipped_with_a_note_and_read_past_once(tmp_path: Path) -> None:
    from pilothouse.core.state.events import MAX_LINE

    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for _ in range(5):
        log.append("job.created", job="before")
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 6, "type": "x", "data": {"junk": "' + b"x" * (MAX_LINE * 8) + b'"}}\n')
    for _ in range(3):
        log.append("job.created", job="after")
    tailer = EventTailer(path)
    got = tailer.tail(6)
    assert [e["job"] for e in got] == ["before"] * 3 + ["after"] * 3
    notice = tailer.skip_notice()
    assert notice is not None and f"longer than {MAX_LINE} bytes" in notice
    log.append("job.created", job="next")
    assert [e["job"] for e in tailer.read_new()] == ["next"]


_EVERY_READER = """
import sys
from pathlib import Path
from pilothouse.core.state.event_index import EventLookup
from pilothouse.core.state.events import EventLog, EventLogUnusable, EventTailer
from pilothouse.core.state.store import history

path = Path(sys.argv[1])
made = []
readers = {
    "read_new": lambda: EventTailer(path).read_new(),
    "tail": lambda: EventTailer(path).tail(5),
    "start_at_end": lambda: EventTailer(path, start_at_end=True),
    "lookup": lambda: EventLookup(path).select("j"),
    "append": lambda: EventLog(path).append("job.created", job="j", commit=lambda: made.append(1)),
}
for name, read in readers.items():
    try:
        read()
        print(name, "read it")
    except EventLogUnusable as exc:
        print(name, str(exc).splitlines()[0])
print("committed" if made else "nothing committed", "witness", history(path.with_name("state.db")))
"""


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_a_fifo_or_a_directory_in_place_of_the_log_is_refused_at_once_by_every_reader_and_the_writer(
        tmp_path: Path, kind: str) -> None:
    """Opened without blocking and checked on the descriptor: no reader waits for a FIFO's writer or
    reads a directory, and the writer makes no change it cannot log (run in a process of its own, so
    a reader that did block fails this test instead of holding the suite)."""
    path = tmp_path / "events.jsonl"
    os.mkfifo(path) if kind == "a FIFO" else path.mkdir()
    out = subprocess.run([sys.executable, "-c", _EVERY_READER, str(path)], capture_output=True, text=True,
                         timeout=guard(120)).stdout.splitlines()
    said = f"{path} is {kind}, not the event log: move it aside (mv {path} {path}.aside) and run this again"
    assert [line.split(" ", 1)[0] for line in out[:-1]] == ["read_new", "tail", "start_at_end", "lookup", "append"]
    assert all(line.split(" ", 1)[1].startswith(said) for line in out[:-1]), out
    assert out[-1] == "nothing committed witness None"


def test_a_second_look_back_counts_a_skipped_line_once(tmp_path: Path) -> None:
    """A caller that looks further back (live leaving heartbeats out) reads the first look's lines
    again: the garbage among them is still one skipped line."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for i in range(10):
        log.append("supervisor.heartbeat", data={"i": i})
    with open(path, "ab") as fh:
        fh.write(b"garbage\n")
    tailer = EventTailer(path)
    assert len(tailer.tail(4)) == 4 and len(tailer.tail(16)) == 10
    assert tailer.skipped == 1
    assert tailer.skip_notice() == (f"{path}: skipped 1 line that is not an event (the line at byte "
                                    f"{path.stat().st_size - 8}: not JSON (Expecting value)); the rest is read as usual")
    with open(path, "ab") as fh:
        fh.write(b"[1]\n")
    tailer.read_new()
    assert tailer.skipped == 2
    again = EventTailer(path)
    again.read_new()
    assert "skipped 2 lines that are not events (first: the line at byte" in (again.skip_notice() or "")
