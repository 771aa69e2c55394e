"""Replay shows what the operator saw live: real jobs on the simulator (the demo; a job whose gate stops
its builder and is fixed by hand; a job that waits for a usage limit) run under the real supervisor,
and while they run, each time the log gains a job, task or problem event, the test reads `job status`
and `problem list` from state.db through the functions those commands print. Afterwards every such
look is replayed from the event log alone at the look's moment, and the job's state, every task's
state and the problems open must be the same. The finished jobs' report numbers are checked against
`job status` and `usage` too."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pilothouse.core import demo
from pilothouse.core.commands.jobs import status_rows
from pilothouse.core.queries.replay import Replay
from pilothouse.core.queries.timeline import TYPES, Timeline
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventTailer
from pilothouse.core.stops.problems import list_problems
from pilothouse.core.supervisor import control as supervisor_ctl
from support import fix_slugify, isolated_env, run_cli

JOB = demo.JOB
# the events after which the operator's view may have changed: a look is taken after each batch of them
WATCHED = ("task.state", "problem.", "job.")
DEADLINE_S = 900.0  # a guard against a hang on a busy machine, never a measure of speed


@dataclass(frozen=True)
class Look:
    """What `job status --json` and `problem list --json` showed, and the log's last line then."""

    seq: int
    job: str
    tasks: dict[str, str]
    listed: frozenset[str]      # `problem list`: open, or answered and not yet closed by the supervisor
    unanswered: frozenset[str]  # of those, the ones still waiting for an answer


@dataclass
class Live:
    layout: RepoLayout
    looks: list[Look] = field(default_factory=list)
    torn: int = 0  # looks thrown away: the log grew while state.db was read


def _last_seq(layout: RepoLayout) -> int:
    last = EventTailer(layout.events).tail(1)
    return int(last[0]["seq"]) if last else 0


def _look(live: Live) -> Look | None:
    """One look through the commands' own readers, kept only if no line was appended during it, so that
    the look belongs to exactly one place in the log."""
    before = _last_seq(live.layout)
    [status] = status_rows(live.layout, JOB)
    problems = list_problems(live.layout, open_only=True, job=JOB)
    after = _last_seq(live.layout)
    if before != after:
        live.torn += 1
        return None
    return Look(seq=before, job=status["state"], tasks={t["task"]: t["state"] for t in status["tasks"]},
                listed=frozenset(p.code for p in problems),
                unanswered=frozenset(p.code for p in problems if p.state == "open" and p.pending is None))


def _watch(live: Live, tailer: EventTailer, done: Callable[[Look], bool], what: str) -> Look:
    """Look after every batch of watched events until a look satisfies `done`; returns that look."""
    deadline = time.monotonic() + DEADLINE_S
    due = False
    while time.monotonic() < deadline:
        due = any(e.get("job") == JOB and str(e.get("type")).startswith(WATCHED) for e in tailer.read_new()) or due
        if not due:
            time.sleep(0.02)  # nothing the operator's view could have changed with: wait for the log to grow
            continue
        look = _look(live)
        if look is None:
            continue  # the log grew while it was read: look again at once
        due = False
        live.looks.append(look)
        if done(look):
            return look
    seen = live.looks[-1] if live.looks else None
    raise AssertionError(f"waited {DEADLINE_S:g}s for {what}; the last look: {seen}; "
                         f"see {live.layout.supervisor_log}")


@contextmanager
def _env(base: Path) -> Iterator[dict[str, str]]:
    """The isolated home a module fixture needs (tests/conftest.py gives only each test its own)."""
    env = isolated_env(base)
    with pytest.MonkeyPatch.context() as mp:
        for var, value in env.items():
            mp.setenv(var, value)
        yield env


def _started(base: Path, scenario: str) -> tuple[Live, EventTailer]:
    layout = demo.prepare(base / "repo", scenario)
    live = Live(layout)
    tailer = EventTailer(layout.events)  # from the first line: the job's creation is a moment too
    supervisor_ctl.start(layout)
    return live, tailer


def _finish(live: Live, tailer: EventTailer, what: str) -> None:
    _watch(live, tailer, lambda look: look.job in ("accepted", "failed"), what)
    supervisor_ctl.stop(live.layout)
    # and once more with nothing running: the last word of state.db against the whole log
    deadline = time.monotonic() + DEADLINE_S
    while (quiet := _look(live)) is None:  # a worker's or the supervisor's last lines still landing
        assert time.monotonic() < deadline, f"waited {DEADLINE_S:g}s for the log to stop growing after the stop"
    live.looks.append(quiet)


@pytest.fixture(scope="module")
def demo_live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    base = tmp_path_factory.mktemp("live-demo")
    with _env(base):
        live, tailer = _started(base, "demo")
        try:
            _finish(live, tailer, "the demo job to be accepted")
        finally:
            supervisor_ctl.stop(live.layout)
    return live


@pytest.fixture(scope="module")
def stopped_live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    """The gate fails twice, the builder is stopped on a problem; the operator fixes the file and retries."""
    base = tmp_path_factory.mktemp("live-stop")
    with _env(base) as env:
        live, tailer = _started(base, "gate-fails-twice")
        try:
            blocked = _watch(live, tailer, lambda look: look.job == "blocked" and bool(look.unanswered),
                             "the job to be blocked on the stopped builder's problem")
            [code] = blocked.unanswered
            [problem] = [p for p in list_problems(live.layout, job=JOB) if p.code == code]
            fix_slugify(Path(problem.evidence["worktree"]))
            r = run_cli("task", "retry", "add-slugify", cwd=live.layout.root, env=env)
            assert r.returncode == 0, r.stderr
            _finish(live, tailer, "the job fixed by hand to be accepted")
        finally:
            supervisor_ctl.stop(live.layout)
    return live


@pytest.fixture(scope="module")
def quota_live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    """The builder's provider answers with a usage limit: the task waits for quota, then builds on."""
    base = tmp_path_factory.mktemp("live-quota")
    with _env(base):
        live, tailer = _started(base, "quota-wait")
        try:
            _finish(live, tailer, "the job that waited for quota to be accepted")
        finally:
            supervisor_ctl.stop(live.layout)
    return live


# ------------------------------------------------------------ the comparison

# The job's state as `job status` says it, from the fold's word for it. The fold knows only the log;
# state.db has no row for a job the supervisor has not taken up yet, and `job status` then says
# "not started" where the log already has the job's creation.
_JOB_STATE_OF_FOLD = {"created": ("created", "not started")}


def _seen(tl: Timeline) -> dict[str, Any]:
    """The replay's view in the look's terms. Task states: the fold keeps each `task.state` event's `to`
    word as it is, which is the word state.db's `tasks.state` holds, so they compare as they are."""
    return {"job": tl.state, "tasks": {t.task: t.state for t in tl.tasks},
            "listed": frozenset(p.code for p in tl.problems if p.outcome is None),
            "unanswered": frozenset(p.code for p in tl.problems if p.answered is None and p.outcome is None)}


def _agrees(part: str, live: Any, replayed: Any) -> bool:
    if part == "job":
        return live in _JOB_STATE_OF_FOLD.get(replayed, (replayed,))
    return bool(live == replayed)


@dataclass
class Verdict:
    exact: int = 0
    in_flight: list[tuple[int, str]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def _compare(live: Live) -> Verdict:
    """Each look against the replay at its seq. state.db is written before the event that reports the
    change (core/supervisor/state.py: a transaction, then the line), so a look can fall between one
    commit and its line: then the part it read shows the next event's change already. Such a part must
    agree with the replay just after that next event; anything else is a mismatch."""
    player = Replay(live.layout.events, JOB)
    seqs = [int(e["seq"]) for e in EventTailer(live.layout.events).read_new()
            if e.get("job") == JOB and e.get("type") in TYPES]
    verdict = Verdict()
    for look in live.looks:
        now = _seen(player.at_seq(look.seq, by="task"))
        following = next((s for s in seqs if s > look.seq), None)
        soon = _seen(player.at_seq(following, by="task")) if following is not None else now
        exact = True
        for part in ("job", "tasks", "listed", "unanswered"):
            mine = getattr(look, part)
            if _agrees(part, mine, now[part]):
                continue
            exact = False
            if _agrees(part, mine, soon[part]):
                verdict.in_flight.append((look.seq, part))
            else:
                verdict.wrong.append(f"at seq {look.seq} {part}: live {sorted(mine) if isinstance(mine, frozenset) else mine}"
                                     f", replay {now[part]} (after seq {following}: {soon[part]})")
        verdict.exact += exact
    return verdict


def _replays_what_was_seen(live: Live, expect: Callable[[list[Look]], None]) -> None:
    # how many looks a run gets depends on the machine (a busy one batches more events per look): only
    # the looks the test waits for are certain, the first of the job's work, its stop, its end
    assert len(live.looks) >= 3, f"too few looks to say anything: {live.looks} (torn: {live.torn})"
    expect(live.looks)
    verdict = _compare(live)
    assert not verdict.wrong, "\n".join(verdict.wrong)
    # a look caught between a commit and its line is rare; most looks are exact
    assert verdict.exact > len(verdict.in_flight), (verdict.exact, verdict.in_flight)


def test_replay_at_each_moment_of_the_demo_shows_the_job_and_task_states_seen_live(demo_live: Live) -> None:
    def expect(looks: list[Look]) -> None:
        assert looks[-1].job == "accepted" and len(looks[-1].tasks) == 4
        assert set(looks[-1].tasks.values()) == {"done"} and not looks[-1].listed

    _replays_what_was_seen(demo_live, expect)


def test_replay_of_a_builder_stopped_by_its_gate_shows_the_problem_open_while_it_was_open_live(
        stopped_live: Live) -> None:
    def expect(looks: list[Look]) -> None:
        # the look the test waited for before fixing the file: the stop, its problem waiting for an answer
        [blocked, *_] = [look for look in looks if look.job == "blocked" and look.unanswered]
        assert blocked.tasks["add-slugify"] == "stopped"
        assert looks[-1].job == "accepted" and looks[-1].tasks["add-slugify"] == "done" and not looks[-1].listed

    _replays_what_was_seen(stopped_live, expect)


def test_replay_of_a_job_that_waited_for_quota_shows_the_wait_where_it_was_seen_live(quota_live: Live) -> None:
    def expect(looks: list[Look]) -> None:
        assert looks[-1].job == "accepted" and set(looks[-1].tasks.values()) == {"done"}
        # the job did wait (the log says so; a look fell inside the wait only if the machine let it)
        waits = [e for e in EventTailer(quota_live.layout.events).read_new()
                 if e["type"] == "task.state" and e["data"].get("to") == "waiting"]
        assert [e["task"] for e in waits] == ["add-slugify"], waits

    _replays_what_was_seen(quota_live, expect)


# ------------------------------------------------------------ the finished jobs' numbers


def _json(root: Path, *args: str) -> Any:
    r = run_cli(*args, "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("job", ["demo_live", "stopped_live", "quota_live"])
def test_the_reports_tokens_and_cost_per_task_and_in_total_are_job_status_and_usage(
        job: str, request: pytest.FixtureRequest) -> None:
    # tests/core/test_report.py checks the demo's per-task tokens against `job status` and the cost by role
    # against `usage`; here also each task's cost (`usage --by task`, the only per-task cost besides the
    # report's), the job's total tokens three ways, and the jobs that stopped or waited for quota
    root = request.getfixturevalue(job).layout.root
    report, status = _json(root, "report", JOB), _json(root, "job", "status", JOB)
    by_task, by_role = _json(root, "usage", JOB, "--by", "task"), _json(root, "usage", JOB)
    assert report["tokens"] == status["tokens"] == by_task["tokens"] == by_role["tokens"] > 0
    assert report["cost_usd"] == pytest.approx(by_task["cost_usd"]) == pytest.approx(by_role["cost_usd"])
    assert {t["task"]: t["tokens"] for t in report["tasks"]} == {t["task"]: t["tokens"] for t in status["tasks"]}
    used = {row["task"]: row for row in by_task["rows"]}
    for task in report["tasks"]:
        assert (task["tokens"], task["cost_usd"]) == (used[task["task"]]["tokens"],
                                                      pytest.approx(used[task["task"]]["cost_usd"])), task["task"]
    # what no task holds is the job's own runs (its planner, a combined review): the same on both sides
    own = report["tokens"] - sum(t["tokens"] for t in report["tasks"])
    assert own == (used["(job)"]["tokens"] if "(job)" in used else 0)


def test_a_seek_by_seq_is_the_fold_of_the_lines_up_to_it_and_parts_lines_stamped_in_one_millisecond(
        stopped_live: Live, tmp_path: Path) -> None:
    from pilothouse.core.queries.timeline import TimelineFold

    events = [e for e in EventTailer(stopped_live.layout.events).read_new() if e.get("job") == JOB]
    player = Replay(stopped_live.layout.events, JOB)
    for n, ev in enumerate(events):
        want = TimelineFold(JOB).extend(events[:n + 1]).snapshot("task")
        assert player.at_seq(int(ev["seq"]), by="task").model_dump() == want.model_dump(), ev["seq"]
    # a log stamps several lines in one millisecond (the demo's does on a quiet machine; under load its
    # lines lie further apart, so two are given one stamp here): a moment in time cannot tell them
    # apart, a seq can (which is why the looks above are replayed by seq)
    lines = [json.loads(line) for line in stopped_live.layout.events.read_text().splitlines()]
    folded = [n for n, e in enumerate(lines) if e.get("job") == JOB and e["type"] in TYPES]
    first, second = next((x, y) for x, y in zip(folded, folded[1:], strict=False) if y == x + 1)
    lines[second]["ts"] = lines[first]["ts"]
    twinned = tmp_path / "events.jsonl"
    twinned.write_text("".join(json.dumps(e) + "\n" for e in lines))
    a, b = lines[first], lines[second]
    player = Replay(twinned, JOB)
    assert player.at_seq(int(a["seq"])).seq == a["seq"] and player.at_seq(int(b["seq"])).seq == b["seq"]
    assert player.at(datetime.fromisoformat(a["ts"])).seq >= b["seq"]
