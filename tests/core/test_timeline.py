"""A job's timeline from its events alone: real jobs on the simulator (the demo; one whose gate fails
twice, stops, and is fixed by hand; one that waits for a usage limit), read again from a copied log
with no state.db beside it, and cut at any moment to show the state then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pilothouse.core.queries import timeline
from pilothouse.core.queries.timeline import Timeline, TimelineFold
from pilothouse.core.state.events import EventTailer
from support import fix_stopped_demo_by_hand


def _demo(cli: Any, root: Path, *scenario: str) -> Any:
    return cli("demo", "--follow", "--dir", str(root), *(("--scenario", *scenario) if scenario else ()), timeout=900)


def _status(cli: Any, root: Path) -> dict[str, Any]:
    r = cli("job", "status", "demo", "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _agrees_with_status(tl: Timeline, status: dict[str, Any], root: Path) -> None:
    import sqlite3

    assert (tl.state, tl.tokens, tl.usage) == (status["state"], status["tokens"], status["usage"])
    mine = {t.task: (t.state, t.tokens, t.usage, t.review_round, t.merged_sha) for t in tl.tasks}
    theirs = {t["task"]: (t["state"], t["tokens"], t["usage"], t["review_round"], t["merged_sha"])
              for t in status["tasks"]}
    assert mine == theirs
    # the attempt each task is on, read from the log, is the one the supervisor counted in its store
    with sqlite3.connect(root / ".ai/runtime/state.db") as db:
        counted = dict(db.execute("SELECT task, attempt FROM tasks WHERE job = 'demo'").fetchall())
    assert {t.task: t.attempts for t in tl.tasks} == counted == {t["task"]: t["attempt"] for t in status["tasks"]}


def _task_states(tl: Timeline, task: str) -> list[str]:
    return [b.state for lane in tl.lanes for b in sorted(lane.bars, key=lambda b: b.start) if b.task == task]


def _copied(root: Path, dest: Path) -> Path:
    """The log alone, as it would arrive from another machine: no state.db, no index, no records."""
    (dest / "runtime").mkdir(parents=True)
    shutil.copy(root / ".ai/runtime/events.jsonl", dest / "runtime/events.jsonl")
    return dest / "runtime/events.jsonl"


def _clipped(tl: Timeline, at: Any) -> list[tuple[Any, ...]]:
    """The bars as they stood at `at`: begun by then, open if they ended later."""
    return sorted(((lane.key, b.task or "", b.state, b.start, b.run or "", b.end if b.end and b.end <= at else None)
                   for lane in tl.lanes for b in lane.bars if b.start <= at), key=repr)


def _cuts_agree(events_path: Path) -> None:
    events = [e for e in EventTailer(events_path).read_new() if e.get("job") == "demo"]
    whole = timeline.read(events_path, "demo")
    for cut in range(10, len(events) - 1, max(1, len(events) // 12)):
        if events[cut + 1]["ts"] == events[cut]["ts"]:
            continue  # a moment is a millisecond: cut where the next event comes later
        part = TimelineFold("demo").extend(events[:cut + 1]).snapshot()
        at = part.end
        assert _clipped(part, at) == _clipped(whole, at), f"cut after {events[cut]['type']}"
        assert [m.seq for m in part.marks] == [m.seq for m in whole.marks if m.at <= at and m.seq <= events[cut]["seq"]]


def test_the_demos_timeline_shows_each_task_planned_built_gated_reviewed_merged_and_agrees_with_job_status(
        cli: Any, tmp_path: Path) -> None:
    root = tmp_path / "demo"
    r = _demo(cli, root)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    tl = timeline.read(root / ".ai/runtime/events.jsonl", "demo")
    _agrees_with_status(tl, _status(cli, root), root)
    first = min((b for lane in tl.lanes for b in lane.bars), key=lambda b: b.start)
    assert (first.task, first.state, first.role) == (None, "planning", "planner") and first.tokens
    for task in ("add-slugify", "add-wordcount", "export-api"):
        assert _task_states(tl, task) == ["building", "gating", "reviewing", "merging"], task
    # the reviewer asked for changes once: built again, gated again, reviewed again
    assert _task_states(tl, "add-titlecase") == ["building", "gating", "reviewing"] * 2 + ["merging"]
    assert [m.kind for m in tl.marks] == ["merge"] * 4
    assert len(tl.lanes) == 3  # three builders side by side, the planner and the full gate in the first slot
    by_task = timeline.read(root / ".ai/runtime/events.jsonl", "demo", by="task")
    assert [lane.key for lane in by_task.lanes] == ["(job)", "add-slugify", "add-wordcount", "add-titlecase",
                                                    "export-api"]
    work = [b for lane in tl.lanes for b in lane.bars if b.tokens is not None]
    assert sum(b.tokens or 0 for b in work) == tl.tokens and all(b.usage == "measured" for b in work)
    assert tl.head and tl.head == tl.tasks[-1].merged_sha
    # the same story from the log alone, somewhere without the repository's state
    copy = _copied(root, tmp_path / "elsewhere")
    assert timeline.read(copy, "demo").model_dump() == tl.model_dump()
    _cuts_agree(copy)


def test_a_stopped_job_fixed_by_hand_shows_the_failures_the_wait_for_the_operator_and_who_answered(
        cli: Any, tmp_path: Path) -> None:
    root = tmp_path / "stop"
    try:
        r = _demo(cli, root, "gate-fails-twice")
        assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
        stopped = timeline.read(root / ".ai/runtime/events.jsonl", "demo")
        waiting = [b for lane in stopped.lanes for b in lane.bars if b.end is None]
        assert [(b.task, b.state) for b in waiting] == [("add-slugify", "waiting_operator")]
        assert stopped.state == "blocked" and stopped.problems[0].reply is None
        fix_stopped_demo_by_hand(cli, root)
    finally:
        cli("job", "stop", "--repo", str(root), timeout=30)
    tl = timeline.read(root / ".ai/runtime/events.jsonl", "demo")
    _agrees_with_status(tl, _status(cli, root), root)
    # built, failed the gate, the builder's one retry failed it again, the stop, the hand fix gated and merged
    assert _task_states(tl, "add-slugify") == ["building", "gating", "building", "gating", "waiting_operator",
                                               "gating", "merging"]
    assert [m.kind for m in tl.marks] == ["gate_failed", "gate_failed", "problem_opened", "problem_answered", "merge"]
    [p] = tl.problems
    assert p.kind == "gate_failed" and p.reply == "retry" and str(p.who).endswith("@cli") and p.answered
    assert [g.passed for g in tl.gates] == [False, False, True, True]
    assert tl.tasks[0].attempts == 1  # the builder and its resume are one attempt; the fix was the operator's
    _cuts_agree(_copied(root, tmp_path / "elsewhere"))


def test_a_quota_wait_is_its_own_bar_and_mark_and_the_build_resumes_after_it(cli: Any, tmp_path: Path) -> None:
    root = tmp_path / "quota"
    r = _demo(cli, root, "quota-wait")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    tl = timeline.read(root / ".ai/runtime/events.jsonl", "demo")
    _agrees_with_status(tl, _status(cli, root), root)
    states = _task_states(tl, "add-slugify")
    assert states[:3] == ["building", "waiting_quota", "building"] and states[-1] == "merging"
    assert [m.kind for m in tl.marks if m.kind == "quota_wait"] == ["quota_wait"]
    assert "usage limit" in next(m.text for m in tl.marks if m.kind == "quota_wait")


@pytest.mark.parametrize("hostile", ["\x1b]0;owned\x07title \x1b[2J", "\u202eevil\u202c"])
def test_worker_text_in_the_timeline_is_inert(tmp_path: Path, hostile: str) -> None:
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers.untrusted import is_inert

    log = EventLog(tmp_path / "events.jsonl", redact=lambda s: s)
    log.append("task.state", job="j", task="t", data={"from": "ready", "to": "running", "reason": hostile})
    log.append("problem.opened", job="j", task="t", data={"code": "ABCDEF", "kind": "gate_failed", "summary": hostile})
    log.append("review.finished", job="j", task="t", data={"round": 1, "overall": "CHANGES", "summaries": [hostile]})
    tl = timeline.read(tmp_path / "events.jsonl", "j")
    shown = [b.reason for lane in tl.lanes for b in lane.bars] + [m.text for m in tl.marks] + \
        [tl.problems[0].summary, *tl.reviews[0].summaries]
    assert len(shown) == 4 and all(s is not None and is_inert(s) for s in shown), shown
    assert all("evil" in s or "title" in s for s in shown if s)  # the words stay, the controls go
