"""Every role on the cluster, end to end: with `ray.roles: [assigner, builder, reviewer]` the demo
job's planning, its builders and its reviews all run on the worker node of a loopback cluster (a
head and one worker node), each placed there and collected here, and the job is accepted with each
task merged once, as it is with every run on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from ray_cluster import Cluster, cluster_up
from support import Events, git

try:
    import ray  # noqa: F401
except ImportError:  # scripts/test installs the [ray] extra: a missing Ray is a broken setup, never a skip
    pytest.fail("the Ray executor's tests need Ray: pip install -e '.[dev,ray]' (scripts/test does)", pytrace=False)

pytestmark = pytest.mark.slow
cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)


def test_the_demo_job_plans_builds_and_reviews_on_the_cluster_and_merges_each_task_once(
        cluster: Cluster, tmp_path: Path) -> None:
    layout = demo.prepare(tmp_path / "repo")
    data = yaml.safe_load(layout.project_yaml.read_text())
    assert data["workflow"]["review"] != "off"  # the demo's reviews are part of what runs there
    data["executor"] = "ray"
    data["ray"] = {"address": cluster.address, "resources": {"pilothouse_worker": 1},
                   "roles": ["assigner", "builder", "reviewer"]}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    git(layout.root, "commit", "-qam", "every role on the cluster")
    ev = Events(layout, timeout=120)
    supervisor_ctl.start(layout)
    try:
        ev.wait(lambda e: e["type"] == "job.accepted", timeout=300)
    finally:
        supervisor_ctl.stop(layout)
    started = {e["run"]: e["data"]["role"] for e in ev.seen if e["type"] == "run.started"}
    placed = {e["run"]: e["data"]["node_id"] for e in ev.seen if e["type"] == "run.placed"}
    [worker] = [n for n, is_worker in cluster.node_ids().items() if is_worker]
    assert set(started.values()) >= {"assigner", "builder", "reviewer"}, started
    assert set(placed) == set(started), (started, placed)  # every run went to the cluster
    assert set(placed.values()) == {worker}
    finished = {e["run"]: e["data"]["verdict"] for e in ev.seen if e["type"] == "run.finished"}
    assert all(finished.get(run) not in (None, "error") for run in started), finished
    conn = store.connect(layout.state_db, readonly=True)
    try:
        tasks = {r["task"]: r["state"] for r in conn.execute("SELECT task, state FROM tasks")}
        reviews = conn.execute("SELECT verdict FROM runs WHERE role='reviewer'").fetchall()
    finally:
        conn.close()
    assert tasks and set(tasks.values()) == {"done"}, tasks
    assert reviews and all(json.loads(r["verdict"] or "{}").get("result") for r in reviews)
    merged = [e["task"] for e in ev.seen if e["type"] == "merge.finished" and e["data"].get("ok")]
    assert sorted(merged) == sorted(tasks), merged
