"""Scheduler latency: a 50-task DAG on the simulator with instant workers (run: python bench/scheduler.py).

Prints, over every dependency edge that made a task launchable (its last dependency to finish):
- the time from that dependency's verdict (its verdict.json written by dispatch) to the dependent's
  launch (its run.started event), minus the dependent's `git worktree add`
  — this includes the supervisor noticing the exit, committing the builder's work, the task gate,
  the merge with its gate, and spawning the next dispatch;
- that time split into the wait for a free worker slot (the dependent was ready, every slot was
  held: the graph is wider than max_workers) and the rest, the supervisor's own reaction, which is
  what the goal is on;
- the median cost of `git worktree add` in that repository;
- the whole job's wall time.

The graph is CHAINS chains of LENGTH tasks (each task depends on the one before it in its chain)
plus a cross edge into the head of every third chain, so finishes are staggered the way real work
is (`--chains 5 --length 10 --max-workers 5` by default; goal: reaction p50 ≤ 0.25 s). Gates are `true`, review is off: the
figures are the supervisor's own cost plus git's, and waiting for the integration lock — merges
are serial (one integration checkout), so the wider the graph, the longer a finished task waits
for the merges ahead of it. A per-phase breakdown follows. Everything runs in a throwaway
PILOTHOUSE_HOME; the load average is printed because git's cost follows it.

Workers run at the project's `worker_nice` (default 19) below the supervisor, whose commits, gates
and merges are the path measured here; `--worker-nice 0` shows the same DAG with workers at the
supervisor's priority (on 2 cores, five instant workers then take most of the CPU).

PILOTHOUSE_BENCH_PROFILE=FILE runs the supervisor under cProfile and leaves its stats in FILE (read
them with `python -m pstats FILE`): where its own reaction goes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

CHAINS, LENGTH, WORKERS = 5, 10, 5  # the default graph


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def graph(chains: int, length: int, prefix: str = "") -> list[dict]:
    tasks = []
    for c in range(chains):
        for i in range(length):
            tid = f"{prefix}c{c}-t{i}"
            deps = [f"{prefix}c{c}-t{i - 1}"] if i else []
            if i == 0 and c > 0 and (c % 3) == 0:
                deps.append(f"{prefix}c{c - 1}-t0")
            tasks.append({"id": tid, "title": f"Task {tid}", "kind": "DEPENDENT" if deps else "SAFE_PARALLEL",
                          "expected_paths": {"write": [f"out/{tid}.txt"]}, "depends_on": deps})
    return tasks


def write_scenario(tasks: list[dict], path: Path) -> None:
    import yaml

    scripts = []
    for t in tasks:
        scripts.append({"match": {"mode": "code", "contains": [f"task: {t['id']}\n"]}, "turns": [
            {"say": "writing", "actions": [{"write": {"path": f"out/{t['id']}.txt", "content": t["id"] + "\n"}}]},
            {"say": '<!--RESULT-->{"status":"complete","files_changed":[],"validation":{"commands":[],'
                    '"passed":true},"risks":[]}<!--/RESULT-->'}]})
    path.write_text(yaml.safe_dump({"name": "bench-dag", "description": "bench", "scripts": scripts}))


def _cpu_s(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its waited-for children's: the git it ran) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def run_graph(chains: int, length: int, workers: int, *, jobs: int = 1, worker_nice: int | None = None,
              timeout: float = 900) -> dict:
    """Run `jobs` jobs of the chains×length graph at once in one scratch repository on the simulator;
    returns what the figures are computed from (or {"error": …})."""
    tmp = Path(tempfile.mkdtemp(prefix="pilothouse-bench-sched-"))
    os.environ["PILOTHOUSE_HOME"] = str(tmp / "home")
    import yaml
    from pilothouse.core import demo
    from pilothouse.core.commands.job_end import wait_for_job
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks
    from pilothouse.core.state import store
    from pilothouse.core.supervisor.planning import mark_plan_ready

    names = [demo.JOB] + [f"job{n}" for n in range(2, jobs + 1)]
    graphs = {name: graph(chains, length, prefix="" if jobs == 1 else f"{name}-") for name in names}
    scenario = tmp / "bench-dag.yaml"
    write_scenario([t for g in graphs.values() for t in g], scenario)
    layout = demo.prepare(tmp / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.update(gates={"fast": "true", "full": "true"}, max_workers=workers)
    if worker_nice is not None:
        data["worker_nice"] = worker_nice
    data["workflow"]["review"] = "off"
    layout.project_yaml.write_text(yaml.safe_dump(data))
    project = load_project(layout)
    conn = store.connect(layout.state_db)
    for name in names:
        if name != demo.JOB:
            create_job(layout, name, "bench: write one file per task")
        save_tasks(layout, validate_tasks(graphs[name], project, job=name))
        mark_plan_ready(conn, name, 1)
    conn.close()

    started = time.monotonic()
    profile = os.environ.get("PILOTHOUSE_BENCH_PROFILE")
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    sup = subprocess.Popen([sys.executable, "-I", *prof, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = (0.0, 0.0)
    try:
        rcs = [wait_for_job(layout, name, timeout=timeout) for name in names]
        wall = time.monotonic() - started
        cpu = _cpu_s(sup.pid)
    finally:
        sup.terminate()
        sup.wait()
    if any(rcs):
        return {"error": f"a bench job did not finish (exits {rcs}); see {layout.supervisor_log}"}
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    return {"layout": layout, "graphs": graphs, "events": events, "wall": wall, "cpu": cpu,
            "tasks": sum(len(g) for g in graphs.values())}


def launch_latencies(run: dict) -> tuple[list[float], list[float], dict]:
    """(verdict → dependent launch for each dependency edge that made a task launchable, minus the
    dependent's worktree creation; each launch's worktree creation; when each task's run started and
    its verdict was written)."""
    from pilothouse.providers.paths import logs_dir

    launch: dict[tuple, tuple[float, float]] = {}
    finished: dict[tuple, float] = {}
    for e in run["events"]:
        if e["type"] == "run.started" and e["task"] and e["data"].get("mode") == "code":
            key = (e["job"], e["task"])
            launch[key] = (_ts(e["ts"]), float(e["data"].get("worktree_ms") or 0) / 1000)
            verdict = logs_dir() / e["data"]["provider"] / f"{e['run']}.verdict.json"
            finished[key] = verdict.stat().st_mtime
    latencies = []
    for job, tasks in run["graphs"].items():
        for t in tasks:
            if not t["depends_on"] or (job, t["id"]) not in launch:
                continue
            last = max(t["depends_on"], key=lambda d: finished[(job, d)])
            at, worktree_s = launch[(job, t["id"])]
            latencies.append(at - finished[(job, last)] - worktree_s)
    return sorted(latencies), [w for _, w in launch.values()], {"launch": launch, "finished": finished}


BUSY = ("running", "gating", "reviewing")  # the task states that hold a worker slot (core/supervisor/state.py)


def slot_split(run: dict, workers: int) -> tuple[list[float], list[float]]:
    """Each dependent launch's verdict → launch (excl. worktree add) split in two: the time it sat
    ready while every one of the `workers` slots was held (slot wait: the graph's width against
    max_workers, not the supervisor), and the rest (the supervisor's own reaction: noticing the
    verdict, committing, gating, merging, launching). Returns (reactions, slot waits), sorted."""
    lat_marks = launch_latencies(run)[2]
    launch, finished = lat_marks["launch"], lat_marks["finished"]
    state: dict[tuple, str] = {}
    busy_at: list[tuple[float, int]] = []  # (when, tasks holding a slot from then on)
    ready: dict[tuple, float] = {}
    for e in run["events"]:
        if e["type"] != "task.state" or not e["task"]:
            continue
        key, to = (e["job"], e["task"]), e["data"].get("to")
        if to == "ready":
            ready[key] = _ts(e["ts"])  # the last time: a task may be ready, then wait on a retry
        state[key] = to
        busy_at.append((_ts(e["ts"]), sum(1 for v in state.values() if v in BUSY)))

    def full_for(t0: float, t1: float) -> float:
        held = 0.0
        for (at, n), nxt in zip(busy_at, [*busy_at[1:], (float("inf"), 0)], strict=True):
            lo, hi = max(at, t0), min(nxt[0], t1)
            if hi > lo and n >= workers:
                held += hi - lo
        return held

    reactions, waits = [], []
    for job, tasks in run["graphs"].items():
        for t in tasks:
            key = (job, t["id"])
            if not t["depends_on"] or key not in launch:
                continue
            last = max(t["depends_on"], key=lambda d: finished[(job, d)])
            at, worktree_s = launch[key]
            total = at - finished[(job, last)] - worktree_s
            since = max(ready.get(key, at), finished[(job, last)])  # ready with its dependency's verdict in
            wait = full_for(since, at - worktree_s)
            waits.append(wait)
            reactions.append(total - wait)
    return sorted(reactions), sorted(waits)


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--chains", type=int, default=CHAINS, help="chains in the graph")
    ap.add_argument("--length", type=int, default=LENGTH, help="tasks in each chain")
    ap.add_argument("--max-workers", type=int, default=WORKERS, help="project.yaml max_workers")
    ap.add_argument("--worker-nice", type=int, default=None,
                    help="project.yaml worker_nice (None: the project default, 19); 0 = workers at the "
                         "supervisor's priority")
    a = ap.parse_args()
    run = run_graph(a.chains, a.length, a.max_workers, worker_nice=a.worker_nice)
    if "error" in run:
        print(run["error"])
        return 1
    lat, worktree, marks = launch_latencies(run)
    launch, finished = marks["launch"], marks["finished"]
    print(f"tasks: {run['tasks']} ({a.chains} chains of {a.length}), max_workers {a.max_workers}, worker_nice "
          f"{a.worker_nice if a.worker_nice is not None else 'default'}, dependent launches "
          f"measured: {len(lat)}, job wall {run['wall']:.1f} s, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"verdict -> dependent launch (excl. worktree add): median {statistics.median(lat) * 1000:.0f} ms, "
          f"p90 {lat[int(len(lat) * 0.9) - 1] * 1000:.0f} ms, min {lat[0] * 1000:.0f} ms")
    reaction, waits = slot_split(run, a.max_workers)
    print(f"  of which waiting for a free worker slot: median {statistics.median(waits) * 1000:.0f} ms, "
          f"max {waits[-1] * 1000:.0f} ms ({sum(1 for w in waits if w > 0)} of {len(waits)} launches waited)")
    print(f"  the supervisor's own reaction (the rest): median {statistics.median(reaction) * 1000:.0f} ms, "
          f"p90 {reaction[int(len(reaction) * 0.9) - 1] * 1000:.0f} ms   (goal <= 250 ms)")
    phases: dict[str, list[float]] = {}
    seen: dict[tuple, dict[str, float]] = {}
    for e in run["events"]:
        if not e["task"]:
            continue
        p = seen.setdefault((e["job"], e["task"]), {})
        if e["type"] == "task.state":
            p.setdefault(e["data"]["to"], _ts(e["ts"]))
        elif e["type"] == "run.finished":
            p["noticed"] = _ts(e["ts"])
    for key, p in seen.items():
        if key not in finished or not {"noticed", "gating", "approved", "merging", "done"} <= set(p):
            continue
        for name, a0, b0 in (("verdict noticed", finished[key], p["noticed"]),
                             ("commit", p["noticed"], p["gating"]), ("task gate", p["gating"], p["approved"]),
                             ("merge (queue + merge + full gate)", p["merging"], p["done"])):
            phases.setdefault(name, []).append(b0 - a0)
    ready = [launch[k][0] - seen[k]["ready"] - launch[k][1] for k in launch if "ready" in seen.get(k, {})]
    phases["ready -> launched (excl. worktree add)"] = ready
    for name, values in phases.items():
        print(f"  {name:<40} median {statistics.median(values) * 1000:6.0f} ms   max {max(values) * 1000:6.0f} ms")
    print(f"git worktree add: median {statistics.median(worktree) * 1000:.0f} ms, "
          f"max {max(worktree) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
