"""A job played back from its event log (core/queries/replay.py): the demo job and a job whose gate
failed twice, stopped, and was fixed by hand, both run for real on the simulator; any moment, reached
forwards or backwards, is the fold of the events up to it from scratch."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pilothouse.core.queries import replay as replay_mod
from pilothouse.core.queries.replay import Replay
from pilothouse.core.queries.timeline import Timeline, TimelineFold
from pilothouse.core.state.events import EventTailer
from support import fix_stopped_demo_by_hand, isolated_env, run_cli

Run = Callable[..., Any]


def _runner(base: Path) -> Run:
    env = isolated_env(base)
    return lambda *args, **kw: run_cli(*args, env=env, **kw)


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("demo")
    r = _runner(base)("demo", "--follow", "--dir", str(base / "repo"), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return base / "repo"


@pytest.fixture(scope="module")
def stopped_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gate fails twice, the job stops on a problem, the operator fixes the file and retries."""
    base = tmp_path_factory.mktemp("stop")
    cli, root = _runner(base), base / "repo"
    try:
        r = cli("demo", "--follow", "--dir", str(root), "--scenario", "gate-fails-twice", timeout=900)
        assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
        fix_stopped_demo_by_hand(cli, root)
    finally:
        cli("job", "stop", "--repo", str(root), timeout=30)
    return root


def _log(root: Path) -> Path:
    return root / ".ai/runtime/events.jsonl"


def _copied(root: Path, dest: Path) -> Path:
    """The log alone, as it would arrive from another machine: no state.db, no index, no records."""
    (dest / ".ai/runtime").mkdir(parents=True)
    shutil.copy(_log(root), dest / ".ai/runtime/events.jsonl")
    return dest / ".ai/runtime/events.jsonl"


def _events(path: Path) -> list[dict[str, Any]]:
    return [e for e in EventTailer(path).read_new() if e.get("job") == "demo"]


def _stamp(ev: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(ev["ts"])


def from_scratch(path: Path, t: datetime, by: str = "slot") -> Timeline:
    """The state at t the slow way: every event of the log read and the ones up to t folded anew."""
    upto = [e for e in _events(path) if _stamp(e) <= t]
    return TimelineFold("demo").extend(upto).snapshot("task" if by == "task" else "slot", until=t.timestamp()
                                                      ).model_copy(update={"end": t})


def _moments(path: Path) -> st.SearchStrategy[datetime]:
    """Any instant around the job, and especially the instants its events were stamped at (a moment is a
    millisecond: the edges are where an off-by-one would show)."""
    stamps = sorted({_stamp(e) for e in _events(path)})
    lo, hi = stamps[0] - timedelta(seconds=2), stamps[-1] + timedelta(seconds=2)
    return st.one_of(st.sampled_from(stamps), st.sampled_from(stamps).map(lambda s: s - timedelta(microseconds=1)),
                     st.datetimes(min_value=lo.replace(tzinfo=None), max_value=hi.replace(tzinfo=None)).map(
                         lambda d: d.replace(tzinfo=UTC)))


def _seeks_agree(path: Path) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.data())
    def check(data: st.DataObject) -> None:
        player = Replay(path, "demo")
        for t in data.draw(st.lists(_moments(path), min_size=1, max_size=6), label="moments"):
            by = data.draw(st.sampled_from(["slot", "task"]), label="by")
            got = player.at(t, by=by)
            assert got.end == t
            assert got.model_dump() == from_scratch(path, t, by).model_dump(), (t, by)

    check()


@pytest.mark.parametrize("every", [3, 256])
def test_any_moment_forwards_or_backwards_is_the_fold_from_scratch_up_to_it(
        demo_root: Path, stopped_root: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    # a fold kept every 3 events: the demo's few dozen make many kept folds, every seek starts from one
    monkeypatch.setattr(replay_mod, "EVERY", every)
    for root in (demo_root, stopped_root):
        _seeks_agree(_log(root))


def test_the_end_of_a_replay_is_the_whole_timeline_and_the_start_shows_the_job_created(demo_root: Path) -> None:
    from pilothouse.core.queries import timeline

    player = Replay(_log(demo_root), "demo")
    events = _events(_log(demo_root))
    assert (player.start, player.end) == (_stamp(events[0]), _stamp(events[-1]))
    whole = timeline.read(_log(demo_root), "demo")
    assert player.at(player.end).model_dump() == whole.model_copy(update={"end": player.end}).model_dump()
    first = player.at(player.start)
    assert first.state == "created" and not first.tasks and not first.runs
    before = player.at(player.start - timedelta(seconds=1))
    assert (before.state, before.seq, before.lanes) == ("created", 0, [])


def test_a_stopped_job_shows_its_problem_open_while_it_waited_and_the_jumps_land_on_each_failure(
        stopped_root: Path) -> None:
    player = Replay(_log(stopped_root), "demo")
    jumps, t = [], player.start
    assert t is not None
    while (mark := player.next_mark(t)) is not None:
        jumps.append(mark)
        t = mark.at
    assert [m.kind for m in jumps] == ["gate_failed", "gate_failed", "problem_opened", "merge"]
    assert [m.kind for m in [player.prev_mark(jumps[-1].at), player.prev_mark(jumps[1].at)]] == [
        "problem_opened", "gate_failed"]
    assert player.prev_mark(jumps[0].at) is None and player.next_mark(jumps[-1].at) is None
    answered = player.next_mark(jumps[2].at, kinds={"problem_answered"})
    assert answered is not None and answered.text.startswith(jumps[2].text.split()[0])
    waiting = player.at(jumps[2].at + (answered.at - jumps[2].at) / 2)
    [problem] = waiting.problems
    assert problem.answered is None and waiting.state == "blocked"
    assert [(b.task, b.state) for lane in waiting.lanes for b in lane.bars if b.end is None] == [
        ("add-slugify", "waiting_operator")]
    after = player.at(answered.at)
    assert after.problems[0].reply == "retry" and after.problems[0].answered == answered.at


def test_the_events_until_a_moment_are_the_jobs_last_lines_of_every_type_read_through_the_index(
        demo_root: Path, tmp_path: Path) -> None:
    for path in (_log(demo_root), _copied(demo_root, tmp_path / "elsewhere")):
        events = _events(path)
        player = Replay(path, "demo")
        for cut in (0, 5, len(events) // 2, len(events) - 1):
            t = _stamp(events[cut])
            want = [e for e in events if _stamp(e) <= t]
            assert player.events_until(t, last=7) == want[-7:]
            assert player.events_until(t, last=1000) == want
        assert player.events_until(_stamp(events[0]) - timedelta(seconds=1)) == []
        assert {e["type"] for e in player.events_until(player.end or t, last=1000)} >= {"run.activity", "run.usage"}
    assert (tmp_path / "elsewhere/.ai/runtime/events.index.db").exists()  # the copy made its own index
    assert not (tmp_path / "elsewhere/.ai/state.db").exists()


def test_refresh_folds_what_a_running_job_appended_and_says_whether_anything_came(
        stopped_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_mod, "EVERY", 4)
    lines = _log(stopped_root).read_bytes().splitlines(keepends=True)
    growing = tmp_path / ".ai/runtime/events.jsonl"
    growing.parent.mkdir(parents=True)
    growing.write_bytes(b"".join(lines[:10]))
    player = Replay(growing, "demo")
    for at in range(10, len(lines), 17):
        with open(growing, "ab") as fh:
            fh.write(b"".join(lines[at:at + 17]))
        assert player.refresh() is any(json.loads(line).get("job") == "demo" for line in lines[at:at + 17])
        assert player.refresh() is False
        end = player.end
        assert end is not None
        assert player.at(end).model_dump() == from_scratch(growing, end).model_dump()
    assert player.at(player.end or end).model_dump() == Replay(_log(stopped_root), "demo").at(end).model_dump()


# ------------------------------------------------------------ pilothouse replay JOB


def _replay_json(root: Path, *args: str, repo: Path | None = None) -> dict[str, Any]:
    r = run_cli("replay", "demo", "--json", *args, *(("--repo", str(repo)) if repo else ()), cwd=root)
    assert r.returncode == 0 and not r.stderr, r.stderr
    return json.loads(r.stdout)


def _agrees(state: dict[str, Any], tl: Timeline) -> None:
    assert (state["state"], state["seq"], state["tokens"], state["cost_usd"]) == (tl.state, tl.seq, tl.tokens,
                                                                                  tl.cost_usd)
    assert state["tasks"] == [t.model_dump(mode="json") for t in tl.tasks]
    assert [r["run"] for r in state["runs_going"]] == [r.run for r in tl.runs if r.end is None]


def test_replay_json_at_several_moments_is_the_fold_from_scratch_and_a_copied_ai_says_the_same(
        demo_root: Path, stopped_root: Path, tmp_path: Path) -> None:
    for root in (demo_root, stopped_root):
        events = _events(_log(root))
        copy = _copied(root, tmp_path / root.parent.name).parent.parent.parent
        for cut in (3, len(events) // 3, len(events) // 2, len(events) - 1):
            t = _stamp(events[cut])
            state = _replay_json(root, "--at", events[cut]["ts"])
            assert state["at"] == t.isoformat()
            _agrees(state, from_scratch(_log(root), t))
            assert state["last_events"][-1]["seq"] == max(e["seq"] for e in events if _stamp(e) <= t)
            assert _replay_json(tmp_path, "--at", events[cut]["ts"], repo=copy) == state
        start = _stamp(events[0])
        assert _replay_json(root, "--at", "+2.5s")["at"] == (start + timedelta(seconds=2.5)).isoformat()
        assert _replay_json(root)["state"] == _replay_json(root, "--at", "end")["state"] == "accepted"
        assert _replay_json(root)["cost_label"] == "simulator"
        assert "and $0.0000 (simulator) in the runs finished" in run_cli("replay", "demo", cwd=root).stdout


def test_replay_json_while_the_problem_was_open_shows_it_open_and_the_job_blocked(stopped_root: Path) -> None:
    events = _events(_log(stopped_root))
    opened = next(e for e in events if e["type"] == "problem.opened")
    answered = next(e for e in events if e["type"] == "problem.answered")
    waiting = _stamp(opened) + (_stamp(answered) - _stamp(opened)) / 2
    state = _replay_json(stopped_root, "--at", waiting.isoformat())
    assert state["state"] == "blocked"
    assert [(p["code"], p["kind"], p["task"]) for p in state["problems_open"]] == [
        (opened["data"]["code"], "gate_failed", "add-slugify")]
    assert next(t for t in state["tasks"] if t["task"] == "add-slugify")["state"] == "stopped"
    assert _replay_json(stopped_root, "--at", answered["ts"])["problems_open"] == []
    text = run_cli("replay", "demo", "--at", waiting.isoformat(), cwd=stopped_root).stdout
    assert "open problems:" in text and opened["data"]["code"] in text and "blocked" in text.splitlines()[0]


@pytest.mark.parametrize(("args", "words"), [
    (("nosuchjob",), "no events of a job named 'nosuchjob'"),
    (("demo", "--at", "yesterday"), "replay --at 'yesterday': not a moment; give an ISO time"),
    (("demo", "--at", "+5x"), "replay --at '+5x'"),
    (("demo", "--at", ""), "replay --at '': not a moment"),
    (("demo", "--at", "+1m30s5"), "replay --at '+1m30s5': a number after the seconds"),
    (("demo", "--at", "2026-02-30"), "replay --at '2026-02-30': not a moment"),
    (("demo", "--speed", "0"), "replay --speed '0': give a number above 0"),
    (("demo", "--speed", "fast"), "replay --speed 'fast'"),
    (("demo", "--last", "-1"), "replay --last '-1': give a whole number"),
])
def test_bad_input_gets_one_line_naming_the_flag_and_the_fix(demo_root: Path, args: tuple[str, ...],
                                                             words: str) -> None:
    r = run_cli("replay", *args, cwd=demo_root)
    assert r.returncode == 2 and not r.stdout
    assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr


@pytest.mark.parametrize(("at", "side"), [
    ("+99999999999999999999h", "after"), ("+100000000h", "after"), ("+" + "9" * 5000 + "h", "after"),
    ("10000-01-01", "after"), ("9999-12-31T23:00:00-05:00", "after"), ("-10h", "before"),
    ("-" + "9" * 30 + "s", "before"), ("0000-01-01", "before"), ("0001-01-01T00:00:00+05:00", "before"),
])
def test_a_moment_no_date_can_hold_is_clamped_to_the_edge_like_any_other(demo_root: Path, at: str,
                                                                          side: str) -> None:
    r = run_cli("replay", "demo", "--json", f"--at={at}", cwd=demo_root)
    assert r.returncode == 0 and len(r.stderr.splitlines()) == 1 and f"{side} the job" in r.stderr, r.stderr
    events = _events(_log(demo_root))
    assert json.loads(r.stdout)["at"] == _stamp(events[0 if side == "before" else -1]).isoformat()


def test_a_negative_offset_counts_back_from_the_job_s_last_event_written_either_way(demo_root: Path) -> None:
    events = _events(_log(demo_root))
    start, end = _stamp(events[0]), _stamp(events[-1])
    assert end - start > timedelta(seconds=3)  # 3 s back is inside the job however fast the machine ran it
    back = (end - timedelta(seconds=3)).isoformat()
    assert _replay_json(demo_root, "--at", "-3s")["at"] == back
    assert _replay_json(demo_root, "--at=-0.05m")["at"] == back
    assert _replay_json(demo_root, "--at", "-3")["at"] == back


def test_a_last_number_without_a_unit_is_of_the_next_unit_down() -> None:
    from pilothouse.core.commands.reports.replay import moment

    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    for text, after in (("+90", 90), ("+1m30", 90), ("+1h30", 5400), ("+1h30m15", 5415), ("+1.5", 1.5)):
        assert moment(text, start, end) == start + timedelta(seconds=after), text
    assert moment("-1h30", start, end) == end - timedelta(minutes=90)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(),
    st.builds(lambda sign, n, unit: f"{sign}{n}{unit}", st.sampled_from("+-"),
              st.integers(min_value=0, max_value=10**400), st.sampled_from(["h", "m", "s", ""])),
    st.builds(lambda y, rest: f"{y:04d}{rest}", st.integers(min_value=0, max_value=10**30),
              st.sampled_from(["-01-01", "-12-31T23:59:59-12:00", "-01-01T00:00+14:00", "-02-29", "-13-01"]))))
def test_any_moment_is_a_time_an_edge_or_one_user_error_never_a_crash(text: str) -> None:
    from pilothouse.core.commands.reports.replay import moment
    from pilothouse.providers.errors import UserError

    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    try:
        at = moment(text, start, end)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("replay --at ")
    else:
        assert at in ("before", "after") or isinstance(at, datetime)


def test_a_moment_outside_the_job_is_clamped_to_its_edge_and_said_so(demo_root: Path) -> None:
    r = run_cli("replay", "demo", "--json", "--at", "2001-01-01T00:00:00Z", cwd=demo_root)
    assert r.returncode == 0 and len(r.stderr.splitlines()) == 1 and "is before the job" in r.stderr
    assert json.loads(r.stdout)["at"] == _stamp(_events(_log(demo_root))[0]).isoformat()
    r = run_cli("replay", "demo", "--json", "--at", "+10h", cwd=demo_root)
    assert "is after the job" in r.stderr and json.loads(r.stdout)["state"] == "accepted"


def _one_job(repo: Path) -> Path:
    """`repo` set up with job j created (its job.created event in the log): the log's path."""
    assert run_cli("init", "--gate-fast", "true", "--no-prove", cwd=repo).returncode == 0
    (repo / "req.md").write_text("do a thing\n")
    assert run_cli("job", "create", "j", "--request-file", "req.md", cwd=repo).returncode == 0
    return repo / ".ai/runtime/events.jsonl"


def test_replay_says_once_the_lines_it_skipped_in_the_words_live_uses(git_repo: Path) -> None:
    events = _one_job(git_repo)
    with open(events, "ab") as fh:
        fh.write(b"garbage\n")
    live = [x for x in run_cli("live", cwd=git_repo).stderr.splitlines() if "skipped" in x]
    r = run_cli("replay", "j", "--json", cwd=git_repo)
    assert r.returncode == 0 and json.loads(r.stdout)["job"] == "j", r.stderr
    assert r.stderr.splitlines() == live and "skipped 1 line that is not an event (the line at byte" in live[0]


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_replay_on_a_fifo_or_a_directory_log_is_one_line_and_never_waits(git_repo: Path, kind: str) -> None:
    from support import refuses_unusable_log

    refuses_unusable_log(git_repo, kind, "replay", "j", "--json")


def test_replay_of_a_job_whose_log_is_missing_says_the_log_is_missing(git_repo: Path) -> None:
    events = _one_job(git_repo)
    events.unlink()
    r = run_cli("replay", "j", "--json", cwd=git_repo)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"pilothouse: {events} is missing, but job 'j' exists (.ai/jobs/j.json): the log holds its history and "
        "nothing else does; put the file back (from a backup or a copy) to read the job's story"]


def test_replay_in_a_repository_not_set_up_says_to_run_init(git_repo: Path) -> None:
    r = run_cli("replay", "j", "--json", cwd=git_repo)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"pilothouse: {git_repo.resolve()} is not set up for pilothouse (no .ai/project.yaml): run `pilothouse init`"]
