"""live / events / why over a real events.jsonl, through the real CLI."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pilothouse.core.commands.live import format_event
from pilothouse.core.queries.why import explain
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventLog, EventTailer
from support import guard


@pytest.fixture
def layout(git_repo: Path) -> RepoLayout:
    return RepoLayout(git_repo)


def seed(layout: RepoLayout) -> EventLog:
    log = EventLog(layout.events)
    log.append("job.created", job="j", data={"revision": 1})
    log.append("task.state", job="j", task="a", data={"from": None, "to": "planned", "reason": "planned in revision 1"})
    log.append("task.state", job="j", task="a", data={"from": "planned", "to": "running", "reason": "launched builder"})
    log.append("supervisor.heartbeat", data={"pid": 1})
    log.append("gate.finished", job="j", task="a", data={"level": "fast", "passed": True})
    log.append("merge.rolled_back", job="j", task="a",
               data={"reason": "merge conflict in src/calc.py; rolled back to abc"})
    log.append("task.state", job="j", task="a", data={"from": "merging", "to": "stopped",
                                                      "reason": "merge conflict in src/calc.py"})
    log.append("task.state", job="j", task="b", data={"from": None, "to": "planned", "reason": "planned"})
    return log


def test_live_json_and_filters(layout: RepoLayout, cli) -> None:
    seed(layout)
    proc = cli("live", "--json", "--last", "-1", "--task", "a", cwd=layout.root)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [e["seq"] for e in lines] == [2, 3, 5, 6, 7] and all(e["task"] == "a" for e in lines)
    proc = cli("live", "--last", "2", cwd=layout.root)
    out = proc.stdout.splitlines()
    assert len(out) == 2 and "stopped: merge conflict" in out[0] and "j/b" in out[1]
    proc = cli("live", "--json", "--type", "merge.", cwd=layout.root)
    assert [json.loads(x)["type"] for x in proc.stdout.splitlines()] == ["merge.rolled_back"]


def test_human_format_is_one_line() -> None:
    ev = {"seq": 1, "ts": "2026-11-29T07:00:00.123Z", "type": "run.finished", "job": "j", "task": "a",
          "data": {"role": "builder", "verdict": "completed", "tokens": 1234, "duration_s": 3.2,
                   "error": "multi\nline"}}
    line = format_event(ev)
    assert "\n" not in line and "builder completed, 1234 tokens, 3.2s: multi line" in line


def test_follow_sees_appends_from_another_process(layout: RepoLayout) -> None:
    log = EventLog(layout.events)
    log.append("job.created", job="j")
    follower = subprocess.Popen([sys.executable, "-m", "pilothouse", "live", "--follow", "--json", "--last", "1"],
                                cwd=layout.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in follower.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        first = json.loads(lines.get(timeout=guard(20)))
        assert first["type"] == "job.created"  # history printed: the follower is up
        code = ("import sys; from pathlib import Path; from pilothouse.core.state.events import EventLog\n"
                "log = EventLog(Path(sys.argv[1]))\n"
                "[log.append('task.state', job='j', task=f't{i}', data={'to': 'ready'}) for i in range(3)]\n")
        subprocess.run([sys.executable, "-c", code, str(layout.events)], check=True)
        got = [json.loads(lines.get(timeout=guard(20))) for _ in range(3)]
        assert [e["task"] for e in got] == ["t0", "t1", "t2"]
        assert [e["seq"] for e in got] == [2, 3, 4]
    finally:
        follower.terminate()
        follower.wait(timeout=guard(10))


def test_events_for_task(layout: RepoLayout, cli) -> None:
    seed(layout)
    proc = cli("events", "--task", "b", "--json", cwd=layout.root)
    assert [json.loads(x)["seq"] for x in proc.stdout.splitlines()] == [8]
    proc = cli("events", cwd=layout.root)
    assert proc.returncode == 2 and "--task" in proc.stderr


def test_why_explains_the_chain_and_the_wait(layout: RepoLayout, cli) -> None:
    seed(layout)
    conn = store.connect(layout.state_db)
    now = "2026-11-29T07:00:00.000Z"
    conn.execute("INSERT INTO tasks(job, task, state, kind, depends_on, reason, updated_at) VALUES "
                 "('j','a','stopped','SAFE_PARALLEL','[]','merge conflict in src/calc.py',?),"
                 "('j','b','planned','DEPENDENT','[\"a\"]','planned',?)", (now, now))
    conn.execute("INSERT INTO problems(code, job, task, kind, summary, replies, state, opened_at) VALUES "
                 "('KXMRTB','j','a','merge_conflict','merge conflict in src/calc.py','[\"retry\",\"skip\"]','open',?)",
                 (now,))
    conn.close()
    report = explain(layout, "j", "a", EventTailer(layout.events).read_new())
    assert report["state"] == "stopped" and "merge conflict" in report["now"]
    assert [c["type"] for c in report["chain"]] == ["task.state", "task.state", "gate.finished",
                                                    "merge.rolled_back", "task.state"]
    assert any(h.startswith("problem KXMRTB") and "pilothouse problem act KXMRTB retry" in h for h in report["hints"])
    assert any(h.startswith("last failure: merge.rolled_back") for h in report["hints"])
    proc = cli("why", "b", cwd=layout.root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "j/b: planned — planned"
    assert "waits for: a (stopped)" in proc.stdout
    proc = cli("why", "a", "--json", cwd=layout.root)
    assert json.loads(proc.stdout)["state"] == "stopped"
    proc = cli("why", "ghost", cwd=layout.root)
    assert proc.returncode == 2 and "no events for task or job 'ghost'" in proc.stderr


def test_live_on_repo_without_events(layout: RepoLayout, cli) -> None:
    proc = cli("live", cwd=layout.root)
    assert proc.returncode == 0 and "no events yet" in proc.stderr


def test_live_follow_goes_on_through_hostile_lines_and_a_restarted_log(layout: RepoLayout) -> None:
    """Lines that are not events are skipped and said once on stderr; a log truncated and written
    again (seq back at 1) is followed from its new start."""
    log = EventLog(layout.events)
    log.append("job.created", job="j")
    follower = subprocess.Popen([sys.executable, "-m", "pilothouse", "live", "--follow", "--json", "--last", "1"],
                                cwd=layout.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in follower.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        assert json.loads(lines.get(timeout=guard(20)))["type"] == "job.created"
        with open(layout.events, "ab") as fh:
            fh.write(b'{"seq": "x", "type": "a"}\n{"seq": 2, "type": "t", "job": ["j"]}\n{"seq": Infinity}\n')
        log.append("task.state", job="j", task="after-garbage")
        assert json.loads(lines.get(timeout=guard(20)))["task"] == "after-garbage"
        with open(layout.events, "r+b") as fh:
            fh.truncate(0)
        for i in range(6):  # more bytes than before: only the changed content says it was rewritten
            log.append("task.state", job="j", task=f"new{i}", data={"to": "ready", "pad": "x" * 40})
        got = [json.loads(lines.get(timeout=guard(20))) for _ in range(6)]
        assert [(e["seq"], e["task"]) for e in got] == [(i + 1, f"new{i}") for i in range(6)]
    finally:
        follower.terminate()
        follower.wait(timeout=guard(10))
    err = follower.stderr.read()  # type: ignore[union-attr]
    assert err.count("not events") == 1 and "skipped 3 lines" in err


def test_events_and_why_read_past_hostile_lines(layout: RepoLayout, cli) -> None:
    seed(layout)
    with open(layout.events, "ab") as fh:
        fh.write(b'{"seq": 9, "type": "task.state", "job": "j", "task": "a", "ts": 17}\n'
                 b'{"seq": 10, "type": "task.state", "job": "j", "task": "a", "data": {"to": ["x"], "reason": 5}}\n'
                 b'{"seq": 11, "type": "problem.opened", "job": "j", "task": "a", "data": {"replies": 7}}\n')
    proc = cli("why", "a", cwd=layout.root)
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 line " in proc.stderr and "ts is not a string" in proc.stderr
    proc = cli("events", "--task", "a", cwd=layout.root)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert len(proc.stdout.splitlines()) == 7


def test_why_on_a_merged_task_names_its_merge(layout: RepoLayout, cli) -> None:
    log = EventLog(layout.events)
    log.append("task.state", job="j", task="a", data={"from": "merging", "to": "done", "reason": "merged"})
    log.append("merge.finished", job="j", task="a", data={"ok": True, "merged_sha": "0123456789abcdef"})
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO tasks(job, task, state, kind, updated_at) VALUES "
                 "('j','a','done','SAFE_PARALLEL','2026-11-29T07:00:00.000Z')")
    conn.close()
    proc = cli("why", "a", cwd=layout.root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "j/a: done — merged"
    assert "→ merged as 0123456789" in proc.stdout


def test_why_shows_the_end_of_a_failed_gates_output_without_its_escape_sequences(layout: RepoLayout, cli) -> None:
    """The gate's output is what the worker's code printed: its last lines reach the operator's
    terminal as text, never as escape sequences."""
    log = EventLog(layout.events)
    log.append("task.state", job="j", task="a", data={"from": "running", "to": "gating"})
    tail = ("collected 3 items\n\x1b[2J\x1b]0;pwned\x07\x1b[31mFAILED\x1b[0m test_x.py::test_one - assert 1 == 2\n\n"
            "1 failed, 2 passed in 0.1s\n")
    log.append("gate.finished", job="j", task="a",
               data={"level": "fast", "passed": False, "reason": "gate 'fast' failed: exit 1", "output_tail": tail})
    proc = cli("why", "a", cwd=layout.root)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert proc.stdout.splitlines()[-4:] == [
        "    its output ends:",
        "    | collected 3 items",
        "    | FAILED test_x.py::test_one - assert 1 == 2",
        "    | 1 failed, 2 passed in 0.1s",
    ]


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_live_events_and_why_refuse_a_fifo_or_a_directory_log_in_one_line(layout: RepoLayout, kind: str) -> None:
    """A FIFO is not waited on (each command is bounded: a hang fails here, it does not hold the
    suite) and a directory is no traceback: one line naming the file and the fix, exit 2."""
    from support import run_cli_bounded

    layout.runtime.mkdir(parents=True)
    os.mkfifo(layout.events) if kind == "a FIFO" else layout.events.mkdir()
    for argv in (["live"], ["live", "--job", "j"], ["live", "--follow"], ["events", "--job", "j"], ["why", "a"]):
        r = run_cli_bounded(*argv, cwd=layout.root)
        assert r is not None, f"{argv} hung on {kind}"
        assert r.returncode == 2 and not r.stdout, (argv, r.stderr)
        assert r.stderr.splitlines() == [f"pilothouse: {layout.events} is {kind}, not the event log: move it "
                                         f"aside (mv {layout.events} {layout.events}.aside) and run this again; "
                                         "the next event starts a new log there"], argv


def test_one_garbage_line_is_one_skipped_line_for_live_with_or_without_filters(layout: RepoLayout, cli) -> None:
    """`live` leaving heartbeats out looks further back than its first look: the garbage line it read
    twice is still said as one, as `live --job` and `why` say it."""
    seed(layout)
    log = EventLog(layout.events)
    for i in range(60):
        log.append("supervisor.heartbeat", data={"pid": i})
    with open(layout.events, "ab") as fh:
        fh.write(b"garbage\n")
    for argv in (["live"], ["live", "--job", "j"], ["why", "a"]):
        r = cli(*argv, cwd=layout.root)
        assert r.returncode == 0, r.stderr
        notes = [x for x in r.stderr.splitlines() if "skipped" in x]
        assert len(notes) == 1 and "skipped 1 line that is not an event (the line at byte" in notes[0], (argv, r.stderr)


def test_live_for_a_job_whose_log_is_missing_says_the_log_is_missing(git_repo: Path, cli) -> None:
    assert cli("init", "--gate-fast", "true", "--no-prove", cwd=git_repo).returncode == 0
    (git_repo / "req.md").write_text("do a thing\n")
    assert cli("job", "create", "j", "--request-file", "req.md", cwd=git_repo).returncode == 0
    events = RepoLayout(git_repo).events
    events.unlink()
    for argv in (["live", "--job", "j"], ["why", "j"]):
        r = cli(*argv, cwd=git_repo)
        assert r.returncode == 2 and r.stderr.splitlines() == [
            f"pilothouse: {events} is missing, but job 'j' exists (.ai/jobs/j.json): the log holds its history and "
            "nothing else does; put the file back (from a backup or a copy) to read the job's story"], r.stderr
