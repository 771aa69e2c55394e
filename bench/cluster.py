"""Per-run overhead of the Ray executor on a loopback cluster (run: python bench/cluster.py).

Starts a head and one worker node on this machine (each a `ray start --block` of its own, stopped
by its session, never `ray stop`), then, on the simulator (review off, gates `true`):

- steady: one supervisor, kept running, is given the same one-task job RUNS times, one after another,
  with its builder on the worker node (`executor: ray`); then the same RUNS times on this machine
  (`executor: local`). This is a supervisor at work: the cluster joined, a spare actor ready.
- cold: RUNS more cluster jobs, each in a fresh scratch repository with a supervisor of its own, so
  each first run also waits for the supervisor to join the cluster and make its actors.

Printed, as medians: started → placed (an actor placed on the node: made for the run, or a spare
claimed), placed → finished (the node's checkout from the hub, the dispatch there, the result
landed), the builder run's started → finished on the cluster and locally, and their difference: the
per-run overhead of the cluster (goal ≤ 1 s on a quiet machine, steady).

A first cluster job warms the node (its Python imports, the hub) and is not counted. The load
average is printed: on a busy machine the figures measure the queue for a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the loopback cluster the executor's tests use (tests/ray_cluster.py)
from ray_cluster import QUICK_BUILDER  # noqa: E402

RUNS = 5
BUILDER = QUICK_BUILDER  # one task, an instant builder (the executor tests' own)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class _Temps:
    """What tests/ray_cluster.cluster_up asks of pytest's tmp_path_factory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name, dir=self.root))


def _repo(root: Path, address: str | None, spares: int | None = None) -> Any:
    """A scratch repository with the demo job on the bench's scenario, on the cluster or not."""
    import yaml
    from pilothouse.core import demo
    from support import git

    repo = Path(tempfile.mkdtemp(prefix="job", dir=root)) / "repo"
    scenario = repo.parent / "bench-cluster.yaml"
    scenario.write_text(BUILDER)
    layout = demo.prepare(repo, str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    if address:
        data["executor"] = "ray"
        data["ray"] = {"address": address, "resources": {"pilothouse_worker": 1},
                       **({"spares": spares} if spares is not None else {})}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    git(layout.root, "commit", "-qam", "bench settings")
    return layout


def _marks(layout: Any, job: str) -> dict[str, float]:
    """The builder run's marks (epoch seconds) in job `job`."""
    marks: dict[str, Any] = {}
    for line in layout.events.read_text().splitlines():
        e = json.loads(line)
        if e.get("job") != job or e.get("task") != "first":
            continue
        kind = {"run.started": "started", "run.placed": "placed", "run.finished": "finished"}.get(e["type"])
        if kind and (kind == "started" or e.get("run") == marks.get("run")):
            marks.setdefault(kind, _ts(e["ts"]))
            marks.setdefault("run", e["run"])
    return {k: v for k, v in marks.items() if k != "run"}


def _wait(layout: Any, job: str) -> None:
    from pilothouse.core.commands.job_end import wait_for_job

    rc = wait_for_job(layout, job, timeout=600)
    if rc:
        raise SystemExit(f"a bench job did not finish (exit {rc}); see {layout.supervisor_log}")


def one_job(root: Path, address: str | None, spares: int | None = None) -> dict[str, float]:
    """The builder run's marks of the demo job in a fresh repository with a supervisor of its own."""
    from pilothouse.core import demo
    from pilothouse.core.supervisor import control as supervisor_ctl

    layout = _repo(root, address, spares)
    supervisor_ctl.start(layout)
    try:
        _wait(layout, demo.JOB)
    finally:
        supervisor_ctl.stop(layout)
    return _marks(layout, demo.JOB)


def steady_jobs(root: Path, address: str | None, runs: int, spares: int | None = None) -> list[dict[str, float]]:
    """The builder run's marks of `runs` jobs given one after another to one running supervisor
    (after the repository's demo job, which warms it)."""
    from pilothouse.core import demo
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.supervisor import control as supervisor_ctl

    layout = _repo(root, address, spares)
    supervisor_ctl.start(layout)
    marks = []
    try:
        _wait(layout, demo.JOB)
        for i in range(runs):
            create_job(layout, f"again-{i}", "Write the note again.")
            _wait(layout, f"again-{i}")
            marks.append(_marks(layout, f"again-{i}"))
    finally:
        supervisor_ctl.stop(layout)
    return marks


def _print(title: str, on_cluster: list[dict[str, float]], local_s: float | None, runs: int) -> None:
    med = statistics.median
    placed = med(m["placed"] - m["started"] for m in on_cluster)
    ran = med(m["finished"] - m["placed"] for m in on_cluster)
    cluster_s = med(m["finished"] - m["started"] for m in on_cluster)
    print(f"{title} (medians of {runs}; load {os.getloadavg()[0]:.1f})")
    print(f"  started → placed on the node          {placed * 1000:7.0f} ms")
    print(f"  placed → finished (checkout, run, land) {ran * 1000:5.0f} ms")
    print(f"  builder run on the cluster             {cluster_s * 1000:7.0f} ms")
    if local_s is not None:
        print(f"  the same run on this machine           {local_s * 1000:7.0f} ms")
        print(f"  per-run overhead of the cluster        {(cluster_s - local_s) * 1000:7.0f} ms   "
              "(goal ≤ 1000 ms, quiet)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--runs", type=int, default=RUNS, help="jobs on each side (after one warm-up job on the cluster)")
    ap.add_argument("--spares", type=int, help="ray.spares of the cluster jobs (default: the project's default, 2); "
                                               "0 measures each run making its own actor")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pilothouse-bench-cluster-"))
    os.environ["PILOTHOUSE_HOME"] = str(root / "home")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray_cluster import cluster_up

    print(f"pilothouse cluster bench — load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    clusters = cluster_up(_Temps(root))  # type: ignore[arg-type]
    cluster = next(clusters)
    try:
        one_job(root, cluster.address)  # warm-up
        steady = steady_jobs(root, cluster.address, a.runs, a.spares)
        local = steady_jobs(root, None, a.runs)
        cold = [one_job(root, cluster.address, a.spares) for _ in range(a.runs)]
    finally:
        clusters.close()  # stops both nodes
    local_s = statistics.median(m["finished"] - m["started"] for m in local)
    _print("steady: one supervisor at work", steady, local_s, a.runs)
    _print("cold: each job's first run, its supervisor just started", cold, local_s, a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
