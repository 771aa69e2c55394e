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
    assert all(p.wait(timeout=60) == 0 for p in procs)
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
    t.join(timeout=20)
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
    commit.thread.join(timeout=10)  # type: ignore[attr-defined]
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
