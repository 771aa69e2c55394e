"""A big job's timeline, report and replay: how long they take (run: python bench/timeline.py).

    python bench/timeline.py                    # 500 tasks, 1,000,000 events (about 2 minutes)
    python bench/timeline.py --events 100000    # a smaller log, to try the script (or to compare sizes)

It writes the event log of one job of 500 tasks run by 20 workers, with the shapes the supervisor and
its runs write: nearly all lines are run.activity and run.usage (as a real run reports its tools and
its tokens), around them each task's task.state, run.started/finished, gate.started/finished,
review.finished and merge.finished; one task in 8 is sent back by its reviewer, one in 10 fails its
gate once and is built again, one in 50 fails it twice, stops, opens a problem the operator answers.
Then it prints (nothing is asserted; goals from the issue that asked for the replay):

- the timeline fold and snapshot, with the event index cold (made from nothing: the first reader of
  a copied `.ai/`) and warm — what the cockpit's timeline pays (goal: under 1 s);
- `pilothouse report JOB --html FILE`, the whole command (goal: a few seconds);
- a replay's seeks to random moments, p50/p99: the fold at t alone, with its snapshot, and the events
  before t (goal: flat as the log grows, a seek folds at most replay.EVERY events), and
  `pilothouse replay JOB --at T --json`, the whole command;
- the cockpit's Timeline widget drawing the snapshot, and the real cockpit from the Timeline screen
  pushed to its chart painted (the read and snapshot in a thread, the paint on the app's) — goal < 1 s.

The load average is printed with the figures: on a busy machine they measure the queue for the CPU.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

JOB = "big"
START_MS = int(datetime(2026, 11, 30, 8, 0, tzinfo=UTC).timestamp() * 1000)
MIN = 60_000


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def row(what: str, figure: str, goal: str = "") -> None:
    print(f"  {what:<52} {figure:<30} {goal}", flush=True)


def _q(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


# ------------------------------------------------------------------ the log

Line = tuple[int, int, int, str, str | None, str | None, dict[str, Any]]  # ms, task no, k, type, task, run, data


class _Task:
    """One task's story, planned up front (how many builds, whether its gate fails, whether it stops)."""

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n, self.name = n, f"t{n:03d}-{rng.choice(['api', 'cli', 'docs', 'core', 'ui'])}"
        self.changes = rng.random() < 1 / 8         # the reviewer sends it back once
        self.gate_fails = 2 if n % 50 == 7 else (1 if rng.random() < 1 / 10 else 0)
        self.build_ms = [rng.randint(8, 40) * MIN for _ in range(1 + min(self.gate_fails, 1) + self.changes)]
        self.review_ms = [rng.randint(2, 8) * MIN for _ in range(1 + self.changes)]
        self.wait_ms = rng.randint(10, 90) * MIN if self.gate_fails == 2 else 0  # the operator's answer
        self.duration = sum(self.build_ms) + sum(self.review_ms) + self.wait_ms + 4 * MIN * len(self.build_ms)


def _run_lines(t0: int, t1: int, n: int, task: str | None, run: str, role: str, count: int,
               rng: random.Random) -> Iterator[Line]:
    """A run's own lines between its start and finish: its tools, and every fourth line its tokens so far."""
    tokens = 0
    for i, at in enumerate(sorted(rng.randint(t0 + 1, t1 - 1) for _ in range(count))):
        if i % 4 == 3:
            tokens += rng.randint(500, 4000)
            yield (at, n, 0, "run.usage", task, run, {"tokens": {"input": tokens * 9 // 10, "output": tokens // 10,
                                                                 "reasoning": 0}, "usage": "measured", "final": False})
        else:
            yield (at, n, 0, "run.activity", task, run, {"tool": f"edit src/m{rng.randint(0, 96)}.py", "role": role})


def _task_lines(task: _Task, begin: int, per_ms: float, rng: random.Random) -> Iterator[Line]:
    name, n, t = task.name, task.n, begin
    k = 0

    def ev(kind: str, data: dict[str, Any], run: str | None = None, at: int | None = None) -> Line:
        nonlocal k
        k += 1
        return (t if at is None else at, n, k, kind, name, run, data)

    def state(frm: str, to: str, reason: str, run: str | None = None) -> Line:
        return ev("task.state", {"from": frm, "to": to, "reason": reason}, run)

    def run_of(role: str, mode: str, attempt: int, length: int) -> Iterator[Line]:
        nonlocal t
        run = f"r{n:03d}-{k:02d}"
        yield ev("run.started", {"role": role, "mode": mode, "provider": "sim", "model": None, "attempt": attempt,
                                 "resume_of": None, "executor": "local"}, run)
        yield from _run_lines(t, t + length, n, name, run, role, max(2, int(length * per_ms)), rng)
        t += length
        tokens = rng.randint(20_000, 400_000)
        yield ev("run.finished", {"role": role, "mode": mode, "provider": "sim", "verdict": "completed",
                                  "tokens": tokens, "usage": "measured", "duration_s": length / 1000,
                                  "parse_state": "parsed", "cost_usd": round(tokens * 3e-6, 6)}, run)
        yield ev("run.usage", {"tokens": {"input": tokens * 9 // 10, "output": tokens // 10, "reasoning": 0},
                               "cost_usd": round(tokens * 3e-6, 6), "usage": "measured", "final": True}, run)

    def gate(passed: bool) -> Iterator[Line]:
        nonlocal t
        yield ev("gate.started", {"level": "fast", "where": "worktree"})
        t += rng.randint(30, 180) * 1000
        yield ev("gate.finished", {"level": "fast", "passed": passed, "where": "worktree",
                                   "reason": None if passed else "3 tests failed", "duration_s": 60.0,
                                   "counts": {"collected": 40, "passed": 40 if passed else 37,
                                              "failed": 0 if passed else 3}})

    yield state("ready", "running", f"{name}: 'simulator' (sim), the first model assignment")
    builds, reviews, fails = list(task.build_ms), list(task.review_ms), task.gate_fails
    yield from run_of("builder", "code", 1, builds.pop(0))
    while True:
        yield state("running", "gating", "builder submitted (completed)")
        if fails:
            yield from gate(False)
            fails -= 1
            if builds and (task.gate_fails == 1 or fails == 1):
                yield state("gating", "running", "gate fast failed; back to the builder (1/1)")
                yield from run_of("builder", "resume", 2, builds.pop(0))
                continue
            code = f"P{n:05d}"
            yield state("gating", "stopped", "gate fast failed twice")
            yield ev("problem.opened", {"code": code, "kind": "gate_failed", "summary": "gate fast failed: 3 tests",
                                        "replies": ["retry", "skip"]})
            t += task.wait_ms
            yield ev("problem.answered", {"code": code, "kind": "gate_failed", "reply": "retry",
                                          "who": "operator@cli", "words": None})
            yield state("stopped", "gating", "the operator fixed it by hand: retry")
            yield ev("problem.closed", {"code": code, "outcome": "retried"})
        yield from gate(True)
        rnd = len(task.review_ms) - len(reviews) + 1
        yield state("gating", "reviewing", f"review round {rnd}")
        yield from run_of("reviewer", "review", 1, reviews.pop(0))
        changes = bool(reviews)
        yield ev("review.finished", {"round": rnd, "overall": "CHANGES" if changes else "PASS",
                                     "findings": int(changes), "summaries": ["a finding"] if changes else []})
        if not changes:
            break
        yield state("reviewing", "running", f"review round {rnd}: CHANGES with 1 findings; back to the builder")
        yield from run_of("builder", "resume", 1, builds.pop(0))
    yield state("reviewing", "approved", "review PASS")
    yield state("approved", "merging", f"merging ph/{JOB}/{name}")
    t += rng.randint(5, 30) * 1000
    sha = f"{rng.getrandbits(160):040x}"
    yield ev("merge.finished", {"ok": True, "merged_sha": sha, "reason": None, "already_merged": False})
    yield state("merging", "done", "merged")


def write_log(path: Path, tasks_n: int, events_n: int, workers: int, seed: int = 7) -> int:
    """The job's log: every task's lines, merged in time order, numbered as the writer numbers them."""
    rng = random.Random(seed)
    tasks = [_Task(n, rng) for n in range(tasks_n)]
    others = tasks_n * 30 + 20  # the lines that are not a run's own, about
    total_run_ms = sum(sum(t.build_ms) + sum(t.review_ms) for t in tasks)
    per_ms = max(0, events_n - others) / total_run_ms
    slots = [START_MS + 2 * MIN] * workers
    starts = []
    for task in tasks:
        begin = heapq.heappop(slots)
        starts.append(begin)
        heapq.heappush(slots, begin + task.duration + 1000)
    end = max(slots)
    head: list[Line] = [(START_MS, -1, 0, "job.created", None, None, {"revision": 1, "acceptance": True}),
                        (START_MS + 10, -1, 1, "run.started", None, "plan", {"role": "assigner", "mode": "plan",
                                                                              "provider": "sim", "attempt": 1})]
    head += list(_run_lines(START_MS + 10, START_MS + MIN, -1, None, "plan", "assigner", 40, rng))
    head += [(START_MS + MIN, -1, 2, "run.finished", None, "plan", {"role": "assigner", "verdict": "completed",
                                                                     "tokens": 90_000, "usage": "measured",
                                                                     "cost_usd": 0.27})]
    head += [(START_MS + MIN + 1, n, -2, "task.state", t.name, None, {"from": None, "to": "planned"})
             for n, t in enumerate(tasks)]
    head += [(START_MS + MIN + 2, -1, 3, "job.planned", None, None, {"revision": 1, "tasks": len(tasks)}),
             (START_MS + MIN + 2, -1, 4, "job.started", None, None, {"revision": 1, "tasks": len(tasks)})]
    head += [(START_MS + MIN + 3, n, -1, "task.state", t.name, None, {"from": "planned", "to": "ready"})
             for n, t in enumerate(tasks)]
    tail: list[Line] = [(end, -1, 5, "gate.started", None, None, {"level": "full", "where": "integration"}),
                        (end + 3 * MIN, -1, 6, "gate.finished", None, None, {"level": "full", "passed": True,
                                                                             "where": "integration"}),
                        (end + 3 * MIN + 5, -1, 7, "job.accepted", None, None, {"head": "f" * 40, "tokens": 0})]
    streams = [iter(head)] + [_task_lines(t, s, per_ms, random.Random(seed * 1000 + t.n))
                              for t, s in zip(tasks, starts, strict=True)] + [iter(tail)]
    seq = 0
    with open(path, "w") as fh:
        chunk = []
        for ms, _, _, kind, task, run, data in heapq.merge(*streams):
            seq += 1
            ts = (datetime.fromtimestamp(ms / 1000, UTC)).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
            chunk.append(json.dumps({"seq": seq, "ts": ts, "type": kind, "job": JOB, "task": task, "run": run,
                                     "data": data}, separators=(",", ":")))
            if len(chunk) == 50_000:
                fh.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            fh.write("\n".join(chunk) + "\n")
    return seq


# ------------------------------------------------------------------ the figures

def _cli(repo: Path, *args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pilothouse", *args, "--repo", str(repo)], capture_output=True,
                          text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"`pilothouse {' '.join(args)}` failed: {proc.stderr.strip()[:300]}")
    return took


def figures(repo: Path, seeks: int) -> None:
    from pilothouse.core.queries import replay, timeline
    from pilothouse.core.state.event_index import index_path

    events = repo / ".ai/runtime/events.jsonl"
    for what in ("cold", "warm"):
        if what == "cold":
            for extra in ("", "-wal", "-shm"):
                Path(str(index_path(events)) + extra).unlink(missing_ok=True)
        t0 = time.perf_counter()
        fold = timeline.fold_of(events, JOB)
        t1 = time.perf_counter()
        tl = fold.snapshot("slot")
        t2 = time.perf_counter()
        fold.snapshot("task")
        t3 = time.perf_counter()
        row(f"timeline, index {what}: read and fold", f"{(t1 - t0) * 1000:,.0f} ms")
        row(f"timeline, index {what}: snapshot by slot / by task",
            f"{(t2 - t1) * 1000:,.0f} ms / {(t3 - t2) * 1000:,.0f} ms")
        row(f"timeline, index {what}: in all (by slot)", f"{(t2 - t0) * 1000:,.0f} ms",
            "goal < 1 s" if what == "warm" else "")
    row("  what it holds", f"{len(tl.lanes)} lanes, {sum(len(la.bars) for la in tl.lanes):,} bars, "
        f"{len(tl.runs):,} runs, {len(tl.marks)} marks")
    out = repo / "report.html"
    took = min(_cli(repo, "report", JOB, "--html", str(out)) for _ in range(2))
    row("pilothouse report JOB --html FILE (whole command)", f"{took:.2f} s ({out.stat().st_size / 1e6:.1f} MB)",
        "goal: a few seconds")

    t0 = time.perf_counter()
    player = replay.Replay(events, JOB)
    row("Replay(events, job): read and keep its folds", f"{(time.perf_counter() - t0) * 1000:,.0f} ms "
        f"({len(player._folds)} folds kept)")
    assert player.start is not None and player.end is not None
    rng = random.Random(3)
    span = (player.end - player.start).total_seconds()
    moments = [player.start + timedelta(seconds=rng.uniform(0, span)) for _ in range(seeks)]
    for what, call in (("the fold at t", player.fold_at), ("the Timeline at t (fold and snapshot)", player.at),
                       ("the last 50 events before t", player.events_until)):
        took_ms = []
        for t in moments:
            t0 = time.perf_counter()
            call(t)
            took_ms.append((time.perf_counter() - t0) * 1000)
        row(f"replay seek, {what}", f"p50 {_q(took_ms, 50):,.1f} ms, p99 {_q(took_ms, 99):,.1f} ms",
            f"folds ≤ {replay.EVERY} events" if what == "the fold at t" else "")
    took = sorted(_cli(repo, "replay", JOB, "--at", t.isoformat(), "--json") for t in moments[:7])
    row("pilothouse replay JOB --at T --json (whole command)", f"p50 {took[len(took) // 2]:.2f} s")
    _draw(tl)
    _cockpit(repo)


def _draw(tl: Any) -> None:
    """The cockpit's chart given the snapshot, to its first paint, in a headless Textual app of 200×50."""
    import asyncio

    from pilothouse.tui.widgets.timeline import TimelineChart
    from textual.app import App, ComposeResult

    class Chart(App[None]):
        def compose(self) -> ComposeResult:
            yield TimelineChart()

    async def drawn() -> float:
        app = Chart()
        async with app.run_test(size=(200, 50)) as pilot:
            chart = app.query_one(TimelineChart)
            t0 = time.perf_counter()
            chart.show(tl)
            await pilot.pause()  # until the app is idle again: the chart is painted
            return time.perf_counter() - t0

    row("the cockpit's timeline chart: shown and painted (200×50)", f"{asyncio.run(drawn()) * 1000:,.0f} ms")


def _cockpit(repo: Path) -> None:
    """The real cockpit on the repository: the Timeline screen pushed, to its chart read and painted."""
    import asyncio

    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.tui.app import CockpitApp
    from pilothouse.tui.screens.timeline import TimelineScreen

    async def opened() -> float:
        app = CockpitApp(RepoLayout(repo), live=False)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()  # the dashboard up first: what is timed is the key's answer
            t0 = time.perf_counter()
            app.push_screen(TimelineScreen(JOB))
            while not (isinstance(app.screen, TimelineScreen) and app.screen.loaded):
                await pilot.pause(0.01)
            await pilot.pause()  # until the app is idle again: the chart is painted
            return time.perf_counter() - t0

    took = asyncio.run(opened())
    row("the cockpit: the Timeline screen to painted (200×50)", f"{took * 1000:,.0f} ms", "goal < 1 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--tasks", type=int, default=500, help="tasks in the job")
    ap.add_argument("--events", type=int, default=1_000_000, help="lines in the job's log, about")
    ap.add_argument("--workers", type=int, default=20, help="tasks at once")
    ap.add_argument("--seeks", type=int, default=200, help="random moments a replay seeks to")
    ap.add_argument("--keep", metavar="DIR", help="write the log into DIR/.ai/runtime and keep it")
    a = ap.parse_args()
    tmp = Path(a.keep or tempfile.mkdtemp(prefix="pilothouse-bench-timeline-"))
    os.environ.setdefault("PILOTHOUSE_HOME", str(tmp / "home"))
    events = tmp / ".ai/runtime/events.jsonl"
    events.parent.mkdir(parents=True, exist_ok=True)
    print(f"pilothouse timeline bench — {a.tasks} tasks, {a.events:,} events, {a.workers} workers ({_load()})")
    try:
        t0 = time.perf_counter()
        n = write_log(events, a.tasks, a.events, a.workers)
        row("the log written", f"{n:,} lines, {events.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t0:.0f} s")
        figures(tmp, a.seeks)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"({_load()} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
