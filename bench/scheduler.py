"""Scheduler latency: a 50-task DAG on the simulator with instant workers (run: python bench/scheduler.py).

Prints, over every dependency edge that made a task launchable (its last dependency to finish):
- the time from that dependency's verdict (its verdict.json written by dispatch) to the dependent's
  launch (its run.started event), minus the dependent's `git worktree add`     goal ≤ 0.25 s median
  — this includes the supervisor noticing the exit, committing the builder's work, the task gate,
  the merge with its gate, and spawning the next dispatch;
- the median cost of `git worktree add` in that repository;
- the whole job's wall time.

The graph is CHAINS chains of LENGTH tasks (each task depends on the one before it in its chain)
plus a cross edge into the head of every third chain, so finishes are staggered the way real work
is (`--chains 5 --length 10 --max-workers 5` by default). Gates are `true`, review is off: the
figures are the supervisor's own cost plus git's, and waiting for the integration lock — merges
are serial (one integration checkout), so the wider the graph, the longer a finished task waits
for the merges ahead of it. A per-phase breakdown follows. Everything runs in a throwaway
PILOTHOUSE_HOME; the load average is printed because git's cost follows it.

Workers run at the project's `worker_nice` (default 10) below the supervisor, whose commits, gates
and merges are the path measured here; `--worker-nice 0` shows the same DAG with workers at the
supervisor's priority (on 2 cores, five instant workers then take most of the CPU).
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

CHAINS, LENGTH, WORKERS = 5, 10, 5


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _graph() -> list[dict]:
    tasks = []
    for c in range(CHAINS):
        for i in range(LENGTH):
            tid = f"c{c}-t{i}"
            deps = [f"c{c}-t{i - 1}"] if i else []
            if i == 0 and c > 0 and (c % 3) == 0:
                deps.append(f"c{c - 1}-t0")
            tasks.append({"id": tid, "title": f"Task {tid}", "kind": "DEPENDENT" if deps else "SAFE_PARALLEL",
                          "expected_paths": {"write": [f"out/{tid}.txt"]}, "depends_on": deps})
    return tasks


def _scenario(tasks: list[dict], path: Path) -> None:
    import yaml

    scripts = []
    for t in tasks:
        scripts.append({"match": {"mode": "code", "contains": [f"task: {t['id']}\n"]}, "turns": [
            {"say": "writing", "actions": [{"write": {"path": f"out/{t['id']}.txt", "content": t["id"] + "\n"}}]},
            {"say": '<!--RESULT-->{"status":"complete","files_changed":[],"validation":{"commands":[],'
                    '"passed":true},"risks":[]}<!--/RESULT-->'}]})
    path.write_text(yaml.safe_dump({"name": "bench-dag", "description": "bench", "scripts": scripts}))


def main() -> int:
    import argparse

    global CHAINS, LENGTH, WORKERS
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=CHAINS)
    ap.add_argument("--length", type=int, default=LENGTH)
    ap.add_argument("--max-workers", type=int, default=WORKERS)
    ap.add_argument("--worker-nice", type=int, default=None,
                    help="project.yaml worker_nice (default: the project default); 0 = workers at the "
                         "supervisor's priority")
    a = ap.parse_args()
    CHAINS, LENGTH, WORKERS = a.chains, a.length, a.max_workers
    tmp = Path(tempfile.mkdtemp(prefix="pilothouse-bench-sched-"))
    os.environ["PILOTHOUSE_HOME"] = str(tmp / "home")
    import yaml
    from pilothouse.core import demo
    from pilothouse.core.commands.supervise import wait_for_job
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks
    from pilothouse.core.state import store
    from pilothouse.core.supervisor.planning import mark_plan_ready

    tasks = _graph()
    scenario = tmp / "bench-dag.yaml"
    _scenario(tasks, scenario)
    layout = demo.prepare(tmp / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.update(gates={"fast": "true", "full": "true"}, max_workers=WORKERS)
    if a.worker_nice is not None:
        data["worker_nice"] = a.worker_nice
    data["workflow"]["review"] = "off"
    layout.project_yaml.write_text(yaml.safe_dump(data))
    save_tasks(layout, validate_tasks(tasks, load_project(layout), job=demo.JOB))
    conn = store.connect(layout.state_db)
    mark_plan_ready(conn, demo.JOB, 1)
    conn.close()

    started = time.monotonic()
    sup = subprocess.Popen([sys.executable, "-I", "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = wait_for_job(layout, demo.JOB, timeout=600)
    finally:
        sup.terminate()
        sup.wait()
    wall = time.monotonic() - started
    if rc != 0:
        print(f"the bench job did not finish (exit {rc}); see {layout.supervisor_log}")
        return 1

    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    launch: dict[str, tuple[float, float]] = {}
    finished: dict[str, float] = {}
    from pilothouse.providers.paths import logs_dir

    for e in events:
        if e["type"] == "run.started" and e["task"] and e["data"].get("mode") == "code":
            launch[e["task"]] = (_ts(e["ts"]), float(e["data"].get("worktree_ms") or 0) / 1000)
            verdict = logs_dir() / e["data"]["provider"] / f"{e['run']}.verdict.json"
            finished[e["task"]] = verdict.stat().st_mtime
    latencies = []
    for t in tasks:
        if not t["depends_on"] or t["id"] not in launch:
            continue
        last = max(t["depends_on"], key=lambda d: finished[d])
        at, worktree_s = launch[t["id"]]
        latencies.append(at - finished[last] - worktree_s)
    worktree = [w for _, w in launch.values()]
    lat = sorted(latencies)
    print(f"tasks: {len(tasks)} ({CHAINS} chains of {LENGTH}), max_workers {WORKERS}, worker_nice "
          f"{data.get('worker_nice', 'default')}, dependent launches "
          f"measured: {len(lat)}, job wall {wall:.1f} s, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"verdict -> dependent launch (excl. worktree add): median {statistics.median(lat) * 1000:.0f} ms, "
          f"p90 {lat[int(len(lat) * 0.9) - 1] * 1000:.0f} ms, min {lat[0] * 1000:.0f} ms   (goal <= 250 ms)")
    phases: dict[str, list[float]] = {}
    seen: dict[str, dict[str, float]] = {}
    for e in events:
        if not e["task"]:
            continue
        p = seen.setdefault(e["task"], {})
        if e["type"] == "task.state":
            p.setdefault(e["data"]["to"], _ts(e["ts"]))
        elif e["type"] == "run.finished":
            p["noticed"] = _ts(e["ts"])
    for tid, p in seen.items():
        if tid not in finished or not {"noticed", "gating", "approved", "merging", "done"} <= set(p):
            continue
        for name, a0, b0 in (("verdict noticed", finished[tid], p["noticed"]),
                             ("commit", p["noticed"], p["gating"]), ("task gate", p["gating"], p["approved"]),
                             ("merge (queue + merge + full gate)", p["merging"], p["done"])):
            phases.setdefault(name, []).append(b0 - a0)
    ready = [launch[t][0] - seen[t]["ready"] - launch[t][1] for t in launch if "ready" in seen.get(t, {})]
    phases["ready -> launched (excl. worktree add)"] = ready
    for name, values in phases.items():
        print(f"  {name:<40} median {statistics.median(values) * 1000:6.0f} ms   max {max(values) * 1000:6.0f} ms")
    print(f"git worktree add: median {statistics.median(worktree) * 1000:.0f} ms, "
          f"max {max(worktree) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
