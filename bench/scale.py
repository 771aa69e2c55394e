"""How pilothouse's costs grow: a table a user can read (run: python bench/scale.py).

    python bench/scale.py                       # everything (about 10 minutes on 2 quiet cores)
    python bench/scale.py --only dag,history    # some sections: dag, jobs, history, repo
    python bench/scale.py --quick               # smaller sizes, to try the script itself

Sections (goals from the scaling issue; the figures are printed, nothing is asserted), each with
its sizes, then (in brackets) the sizes --quick uses:
- dag: a 50-task and a 500-task graph [10 and 50] with 20 workers and instant sim workers — verdict →
  dependent launch p50/p99, split into the wait for a free worker slot (the graph is wider than
  max_workers) and the supervisor's own reaction (goal p50 ≤ 250 ms at both sizes), supervisor CPU
  per task (its own and the git it ran; goal flat within 1.5×), job wall against the critical path
  (wall ÷ tasks on the longest chain). `--tasks 500` runs the large graph only.
- jobs: 10 jobs of 20 tasks [3 jobs of 10] running at once in one repository.
- history: 1,000 jobs, 100,000 runs [10,000] in state.db, and an events.jsonl of 1 M then 10 M lines
  [20,000 then 200,000] — `job status`,
  `problem list`, `why`, and the cockpit's first paint (goal: flat within 1.5× from 1 M to 10 M). The
  log's index (events.index.db) is brought up to date once before the commands, as the supervisor
  keeps it at each heartbeat; that one-time catch-up is printed too.
- repo: a repository of 100,000 files [10,000] — time and disk to make a worker's checkout.

The load average is printed with each section: on a busy machine, wall-clock figures measure the
queue for the CPU, not pilothouse.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def _bench_module(name: str) -> Any:
    """A sibling script of bench/ as a module, by its path (whatever the current folder and sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cockpit = _bench_module("cockpit")  # the first-paint probe
scheduler = _bench_module("scheduler")  # runs a graph on the simulator

ROWS: list[tuple[str, str, str]] = []


def row(what: str, figure: str, goal: str = "") -> None:
    ROWS.append((what, figure, goal))
    print(f"  {what:<58} {figure:<28} {goal}", flush=True)


def _q(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


# ------------------------------------------------------------------ dag and jobs

def dag(sizes: list[tuple[int, int]], workers: int) -> None:
    print(f"\n== task graph on the simulator, {workers} workers, instant workers ({_load()})")
    per_task = {}
    for chains, length in sizes:
        run = scheduler.run_graph(chains, length, workers)
        if "error" in run:
            row(f"{chains * length} tasks", run["error"])
            continue
        lat, worktree, _ = scheduler.launch_latencies(run)
        reaction, waits = scheduler.slot_split(run, workers)
        own, children = run["cpu"]
        n = run["tasks"]
        per_task[n] = (own + children) / n
        row(f"{n} tasks: verdict → dependent launch", f"p50 {_q(lat, 50) * 1000:.0f} ms, p99 {_q(lat, 99) * 1000:.0f} ms")
        row(f"{n} tasks:   of which waiting for a worker slot", f"p50 {_q(waits, 50) * 1000:.0f} ms, "
            f"p99 {_q(waits, 99) * 1000:.0f} ms ({sum(1 for w in waits if w > 0)}/{len(waits)} waited)")
        row(f"{n} tasks:   the supervisor's own reaction", f"p50 {_q(reaction, 50) * 1000:.0f} ms, "
            f"p99 {_q(reaction, 99) * 1000:.0f} ms", "goal p50 ≤ 250 ms")
        row(f"{n} tasks: supervisor CPU per task", f"{per_task[n] * 1000:.0f} ms ({own * 1000 / n:.0f} own + "
            f"{children * 1000 / n:.0f} git)")
        row(f"{n} tasks: job wall ÷ critical path ({length} tasks)",
            f"{run['wall']:.0f} s ÷ {length} = {run['wall'] / length:.1f} s a step")
        row(f"{n} tasks: git worktree add", f"p50 {_q(worktree, 50) * 1000:.0f} ms")
    if len(per_task) == 2:
        small, large = sorted(per_task)
        row(f"CPU per task, {large} vs {small} tasks", f"{per_task[large] / per_task[small]:.2f}×", "goal ≤ 1.5×")


def jobs(count: int, chains: int, length: int, workers: int) -> None:
    print(f"\n== {count} jobs of {chains * length} tasks at once in one repository ({_load()})")
    run = scheduler.run_graph(chains, length, workers, jobs=count)
    if "error" in run:
        row("jobs at once", run["error"])
        return
    lat, _, _ = scheduler.launch_latencies(run)
    reaction, waits = scheduler.slot_split(run, workers)
    own, children = run["cpu"]
    row(f"{run['tasks']} tasks in {count} jobs: verdict → dependent launch",
        f"p50 {_q(lat, 50) * 1000:.0f} ms, p99 {_q(lat, 99) * 1000:.0f} ms")
    row(f"{run['tasks']} tasks in {count} jobs:   of which slot wait, reaction",
        f"p50 {_q(waits, 50) * 1000:.0f} ms, {_q(reaction, 50) * 1000:.0f} ms", "goal reaction p50 ≤ 250 ms")
    row(f"{count} jobs: wall, supervisor CPU per task",
        f"{run['wall']:.0f} s, {(own + children) * 1000 / run['tasks']:.0f} ms")


# ------------------------------------------------------------------ history

PER_JOB = 10_000  # events a job leaves in the log: a longer log is more jobs, not longer ones
EVENT_TYPES = ("run.activity", "run.activity", "run.activity", "run.usage", "task.state", "gate.finished")


def _history_store(repo: Path, jobs_n: int, tasks_n: int, runs_n: int) -> None:
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.state.store import connect

    layout = RepoLayout(repo)
    layout.jobs_dir.mkdir(parents=True, exist_ok=True)
    ts = "2026-11-29T06:00:00.000Z"
    for j in range(jobs_n):
        record = {"name": f"job{j:04d}", "created_at": ts,
                  "revisions": [{"revision": 1, "request": f"bench job {j}", "at": ts}]}
        (layout.jobs_dir / f"job{j:04d}.json").write_text(json.dumps(record))
    db = connect(layout.state_db)
    with db:
        db.executemany("INSERT INTO jobs_state (job, state, revision, created_at, updated_at, finished_at) "
                       "VALUES (?, ?, 1, ?, ?, ?)",
                       [(f"job{j:04d}", "accepted" if j < jobs_n - 5 else "running", ts, ts,
                         ts if j < jobs_n - 5 else None) for j in range(jobs_n)])
        db.executemany("INSERT INTO tasks (job, task, state, kind, provider, model, started_at, updated_at) "
                       "VALUES (?, ?, ?, 'SAFE_PARALLEL', 'sim', 'sim-coder', ?, ?)",
                       [(f"job{j:04d}", f"t{t}", "done" if j < jobs_n - 5 else "running", ts, ts)
                        for j in range(jobs_n) for t in range(tasks_n)])
        db.executemany("INSERT INTO runs (run_id, job, task, role, provider, model, mode, state, started_at) "
                       "VALUES (?, ?, ?, 'builder', 'sim', 'sim-coder', 'code', 'finished', ?)",
                       [(f"r{n:06d}", f"job{(n // tasks_n) % jobs_n:04d}", f"t{n % tasks_n}", ts)
                        for n in range(runs_n)])
        db.executemany("INSERT INTO problems (code, job, task, kind, summary, replies, state, opened_at) "
                       "VALUES (?, ?, 't1', 'gate_failed', 'gate fast failed', '[\"retry\", \"skip\"]', ?, ?)",
                       [(f"P{n:05d}", f"job{n % jobs_n:04d}", "open" if n % 50 == 0 else "closed", ts)
                        for n in range(2000)])
    db.close()


def _append_events(path: Path, start: int, count: int, jobs_n: int, tasks_n: int) -> None:
    with open(path, "a") as fh:
        chunk = []
        for seq in range(start, start + count):
            job = f"job{(seq // PER_JOB) % jobs_n:04d}"  # a job's history is the same size in any log
            kind = EVENT_TYPES[seq % len(EVENT_TYPES)]
            data = {"tool": f"edit src/m{seq % 97}.py"} if kind == "run.activity" else {"to": "running"}
            chunk.append(json.dumps({"seq": seq, "ts": "2026-11-29T06:59:59.000Z", "type": kind, "job": job,
                                     "task": f"t{seq % tasks_n}", "run": f"r{seq % 100000:06d}", "data": data},
                                    separators=(",", ":")))
            if len(chunk) == 50000:
                fh.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            fh.write("\n".join(chunk) + "\n")


def _timed(repo: Path, *args: str, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pilothouse", *args], cwd=repo, capture_output=True, text=True)
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"`pilothouse {' '.join(args)}` failed: {proc.stderr.strip()[:300]}")
        best = min(best, took)
    return best


def _first_paint(repo: Path) -> float:
    out = subprocess.run([sys.executable, "-c", cockpit.FIRST_PAINT, str(repo)], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[-3])  # FIRST_PAINT prints: imports, CPU, paint (s), peak RSS (MB), CPU from start


def history(root: Path, sizes: list[int], jobs_n: int, runs_n: int) -> None:
    from pilothouse.core.state.event_index import EventIndex

    print(f"\n== history: {jobs_n:,} jobs, {runs_n:,} runs in state.db, events.jsonl growing ({_load()})")
    repo = root / "history"
    (repo / ".git").mkdir(parents=True)
    tasks_n = 10
    _history_store(repo, jobs_n, tasks_n, runs_n)
    events = repo / ".ai" / "runtime" / "events.jsonl"
    figures: dict[int, dict[str, float]] = {}
    written = 0
    asked = f"job{min(50, sizes[0] // PER_JOB - 1):04d}"  # one whose events are in the smallest log
    for size in sizes:
        t0 = time.perf_counter()
        _append_events(events, written + 1, size - written, jobs_n, tasks_n)
        made = time.perf_counter() - t0
        written = size
        t0 = time.perf_counter()
        with EventIndex(events) as index:
            index.catch_up()
        caught = time.perf_counter() - t0
        mb = events.stat().st_size / 1e6
        row(f"{size:,} lines ({mb:,.0f} MB, written in {made:.0f} s): index catch-up",
            f"{caught:.1f} s once ({(events.parent / 'events.index.db').stat().st_size / 1e6:.0f} MB)")
        f = figures[size] = {
            "job status JOB": _timed(repo, "job", "status", f"job{jobs_n - 1:04d}"),
            "job status": _timed(repo, "job", "status"),
            "problem list": _timed(repo, "problem", "list"),
            "why TASK --job JOB": _timed(repo, "why", "t3", "--job", asked),
            "events --task --job": _timed(repo, "events", "--task", "t3", "--job", asked),
            "live --last 50": _timed(repo, "live", "--last", "50"),
            "cockpit first paint": min(_first_paint(repo) for _ in range(2)),
        }
        for what, secs in f.items():
            row(f"{size:,} lines: {what}", f"{secs * 1000:.0f} ms")
    if len(figures) == 2:
        small, large = sorted(figures)
        for what in figures[small]:
            ratio = figures[large][what] / figures[small][what]
            row(f"{what}: {large:,} vs {small:,} lines", f"{ratio:.2f}×", "goal ≤ 1.5×")


# ------------------------------------------------------------------ repo

def repo(root: Path, files: int) -> None:
    from pilothouse.core.git.worktrees import git

    print(f"\n== a repository of {files:,} files ({_load()})")
    big = root / "bigrepo"
    big.mkdir()
    git(big, "init", "-q", "-b", "main")
    t0 = time.perf_counter()
    per_dir = 100
    for d in range(files // per_dir):
        folder = big / "src" / f"pkg{d:04d}"
        folder.mkdir(parents=True)
        for f in range(per_dir):
            (folder / f"m{f:03d}.py").write_text(f"VALUE = {d * per_dir + f}\n")
    git(big, "add", "-A")
    git(big, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "big")
    row("made and committed", f"{time.perf_counter() - t0:.0f} s")
    from pilothouse.core.git import pool
    from pilothouse.core.git.checkout import commit_all
    from pilothouse.core.records.layout import RepoLayout

    layout = RepoLayout(big)
    made, reused = [], []
    for n in range(3):
        t0 = time.perf_counter()
        path, _, how = pool.checkout_for(layout, "bench", f"new{n}", "main", keep=0)
        made.append(time.perf_counter() - t0)
        assert how == "new"
    du = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True).stdout.split()[0]
    row("a new checkout (git worktree add)", f"p50 {statistics.median(made) * 1000:.0f} ms, {du} MB on disk",
        "goal ≤ 0.2 s ready")
    for n in range(3):
        # a task changes one file and merges; the next task starts from the new base
        (path / "src" / "pkg0000" / f"m{n:03d}.py").write_text(f"VALUE = -{n}\n")
        commit_all(path, f"task {n}")
        git(big, "merge", "-q", "--ff-only", f"ph/bench/{path.name}")
        assert pool.release(layout, path, "bench", path.name, keep=4, base="main")  # as the supervisor does
        t0 = time.perf_counter()
        path, _, how = pool.checkout_for(layout, "bench", f"pooled{n}", "main", keep=4)
        reused.append(time.perf_counter() - t0)
        assert how == "pooled"
    row("a pooled checkout switched to the next task's base", f"p50 {statistics.median(reused) * 1000:.0f} ms, "
        "no new disk", "goal ≤ 0.2 s ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--only", default="dag,jobs,history,repo", help="sections, comma-separated")
    ap.add_argument("--quick", action="store_true", help="the smaller sizes in brackets above (to try the script)")
    ap.add_argument("--tasks", type=int, choices=(50, 500), help="dag: only the graph of this many tasks")
    a = ap.parse_args()
    only = set(a.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="pilothouse-bench-scale-"))
    os.environ["PILOTHOUSE_HOME"] = str(tmp / "home")
    started = time.monotonic()
    print(f"pilothouse scale bench — {_load()}")
    try:
        if "dag" in only:
            sizes = [(5, 2), (5, 10)] if a.quick else [(5, 10), (25, 20)]
            dag([c for c in sizes if a.tasks in (None, c[0] * c[1])] or sizes, 20)
        if "jobs" in only:
            jobs(3 if a.quick else 10, 2, 5 if a.quick else 10, 20)
        if "history" in only:
            history(tmp, [20_000, 200_000] if a.quick else [1_000_000, 10_000_000], 1000,
                    10_000 if a.quick else 100_000)
        if "repo" in only:
            repo(tmp, 10_000 if a.quick else 100_000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({time.monotonic() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
