"""Where the Ray executor places a run, on a loopback cluster (a head, the module's worker node and,
where a test needs it, a second worker node of its own): a run no node takes says why; a run lost
with its node names it and its retry goes to a live node; a resumed builder goes to the node that
holds its session's sandbox, and when that node is gone the builder starts again, fresh, saying so."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.supervisor import control as supervisor_ctl
from ray_cluster import (
    ONE_NOTE_PLAN,
    SLOW_BUILDER,
    WAIT_FOR_GO,
    Cluster,
    cluster_up,
    err_of,
    ray_project,
    say_go,
    start_worker,
    stop,
    wait_for,
)
from support import Events, guard, until

try:
    import ray
except ImportError:  # scripts/test installs the [ray] extra: a missing Ray is a broken setup, never a skip
    pytest.fail("the Ray executor's tests need Ray: pip install -e '.[dev,ray]' (scripts/test does)", pytrace=False)

pytestmark = pytest.mark.slow
cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)


def test_a_run_no_node_takes_says_what_it_asks_for_and_that_no_node_offers_it(cluster: Cluster,
                                                                            tmp_path: Path) -> None:
    from pilothouse.core.upkeep import ending

    layout = demo.prepare(tmp_path / "repo")
    ray_project(layout, cluster)
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["ray"]["resources"] = {"gpu_box": 1}  # no node of the cluster offers it
    layout.project_yaml.write_text(yaml.safe_dump(data))
    ev = Events(layout, timeout=90)
    supervisor_ctl.start(layout)
    try:
        unplaced = ev.wait(lambda e: e["type"] == "run.unplaced")
        supervisor_ctl.stop(layout)
        ending.cancel_job(layout, demo.JOB)  # its actor, never placed, must not wait on the cluster for good
    finally:
        supervisor_ctl.stop(layout)
        ray.shutdown()
    assert unplaced["data"]["resources"] == {"gpu_box": 1}
    assert unplaced["data"]["nodes_offering"] == 0 and unplaced["data"]["nodes_alive"] == 2
    assert "it asks for gpu_box: 1, which none of the 2 live node(s) offer" in unplaced["data"]["reason"]
    assert not any(e["type"] == "run.placed" for e in ev.seen)


@pytest.fixture
def second_node(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A second worker node offering `pilothouse_worker: 1`: its id and its process."""
    before = set(cluster.node_ids())
    home, temp = tmp_path / "node-b", Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    home.mkdir()
    proc = start_worker(cluster.address, home, temp, {"pilothouse_worker": 1})
    try:
        wait_for("the second worker node", lambda: len(cluster.node_ids()) == len(before) + 1)
        [node] = set(cluster.node_ids()) - before
        yield node, proc
    finally:
        if proc.poll() is None:
            stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


@ray.remote(num_cpus=0, resources={"pilothouse_worker": 1})
class Holder:
    """Takes a worker node's one place, so no run goes there while it lives."""

    def ready(self) -> bool:
        return True


def _hold(node: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return Holder.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()


def test_a_run_lost_with_its_node_says_which_node_and_its_retry_goes_to_a_live_one(
        cluster: Cluster, second_node: tuple[str, Any], tmp_path: Path) -> None:
    """A second worker node takes the builder (the first is held by a placeholder) and is killed: the
    run's end names that node, and the automatic retry is placed on the live node, not the lost one."""
    from pilothouse.core.upkeep import ending

    node_b, proc_b = second_node
    scenario = tmp_path / "slow-builder.yaml"
    scenario.write_text(SLOW_BUILDER)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    ray_project(layout, cluster)
    [live] = [n for n, is_worker in cluster.node_ids().items() if is_worker and n != node_b]  # the module's
    ev = Events(layout, timeout=120)
    ray.init(address=cluster.address, namespace="placeholder", logging_level="ERROR", log_to_driver=False)
    try:
        holder = _hold(live)
        assert ray.get(holder.ready.remote(), timeout=guard(60))
        supervisor_ctl.start(layout)
        first = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        assert first["data"]["node_id"] == node_b
        until((tmp_path / "node-b" / "pilothouse" / "state" / "logs" / "sim" / f"{first['run']}.jsonl").exists,
              "the builder never started on the second node", every=0.1)
        stop(proc_b)  # the node dies while its run goes on
        lost = ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == first["run"])
        ray.kill(holder)  # the live node is free again
        again = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first" and e["run"] != first["run"])
        supervisor_ctl.stop(layout)
        ending.cancel_job(layout, demo.JOB)
    finally:
        supervisor_ctl.stop(layout)
        ray.shutdown()
    said = err_of(layout, first["run"])
    assert f"the node {first['data']['hostname']} ({first['data']['node_id'][:12]}) that ran it" in said, said
    assert lost["data"]["verdict"] == "error"
    assert again["data"]["node_id"] == live


# the builder waits for the word `go` in its checkout (the test says it once the nodes are arranged),
# writes a draft the gate refuses; its resume (the same session, on from its last turn) finishes it
RESUMED = """name: resumed-builder
description: "a builder whose gate fails once, so its session is resumed"
scripts:
""" + ONE_NOTE_PLAN + """  - match:
      mode: code
    turns:
""" + WAIT_FOR_GO + """      - say: "A first draft."
        actions:
          - write: {path: notes/first.txt, content: "draft\\n"}
      - say: |
          Drafted the note.
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
      - say: "The gate wants it done: finishing the note."
        actions:
          - write: {path: notes/first.txt, content: "done\\n"}
      - say: |
          Finished the note.
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""
NOTE_DONE = "test ! -e notes/first.txt || grep -qx done notes/first.txt"  # the base, without the note, passes


@pytest.mark.parametrize("node_b_then", ["freed", "stopped"])
def test_a_resumed_builder_goes_to_the_node_holding_its_sandbox_or_starts_fresh_when_that_node_is_gone(
        cluster: Cluster, second_node: tuple[str, Any], tmp_path: Path, node_b_then: str) -> None:
    """The first run goes to node B (the module's node A is held). By the time it ends, a holder has
    taken B's place and A is free: the resume waits for B, saying so (anywhere else its node would
    refuse it for want of the sandbox). "freed": it continues its session on B once B is free.
    "stopped": B stops while the resume waits; the run says B is gone, and a fresh builder runs on A."""
    from pilothouse.core.state import store
    from pilothouse.core.upkeep import ending

    node_b, proc_b = second_node
    [node_a] = [n for n, is_worker in cluster.node_ids().items() if is_worker and n != node_b]
    scenario = tmp_path / "resumed-builder.yaml"
    scenario.write_text(RESUMED)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    ray_project(layout, cluster, gates={"fast": NOTE_DONE, "full": NOTE_DONE})
    ev = Events(layout, timeout=120)
    ray.init(address=cluster.address, namespace="placeholder", logging_level="ERROR", log_to_driver=False)
    try:
        on_a = _hold(node_a)
        assert ray.get(on_a.ready.remote(), timeout=guard(60))
        supervisor_ctl.start(layout)
        first = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        assert first["data"]["node_id"] == node_b
        on_b = _hold(node_b)  # waits for B's place, which it takes when the first run's actor is gone
        ray.kill(on_a)
        say_go(first)
        ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == first["run"])
        assert ray.get(on_b.ready.remote(), timeout=guard(60))
        resume = ev.wait(lambda e: e["type"] == "run.started" and e["task"] == "first" and e["run"] != first["run"])
        waiting = ev.wait(lambda e: e["type"] == "run.unplaced" and e["run"] == resume["run"])
        assert waiting["data"]["pinned_to"] == node_b
        assert f"it resumes run {first['run']}, whose sandbox is on node {node_b[:12]} alone" in \
            waiting["data"]["reason"]
        if node_b_then == "freed":
            ray.kill(on_b)
            placed = ev.wait(lambda e: e["type"] == "run.placed" and e["run"] == resume["run"])
            assert placed["data"]["node_id"] == node_b
            ev.wait(lambda e: e["type"] == "job.accepted", timeout=180)
        else:
            stop(proc_b)
            ended = ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == resume["run"])
            assert ended["data"]["verdict"] == "error"
            said = err_of(layout, resume["run"])
            assert f"which holds the sandbox of run {first['run']} whose session this resume continues, is gone: " \
                   "the builder starts again, fresh, on a live node" in said, said
            fresh = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first"
                            and e["run"] not in (first["run"], resume["run"]))
            assert fresh["data"]["node_id"] == node_a
            supervisor_ctl.stop(layout)
            ending.cancel_job(layout, demo.JOB)
    finally:
        supervisor_ctl.stop(layout)
        ray.shutdown()
    conn = store.connect(layout.state_db)
    modes = [r["mode"] for r in conn.execute("SELECT mode FROM runs WHERE task='first' AND role='builder' "
                                             "ORDER BY rowid")]
    conn.close()
    assert modes == ["code", "resume"] + (["code"] if node_b_then == "stopped" else []), modes
    if node_b_then == "freed":
        assert sum(1 for e in ev.seen if e["type"] == "merge.finished" and e["task"] == "first" and e["data"].get("ok")) == 1


def test_a_resume_is_placed_only_where_its_first_runs_sandbox_is(cluster: Cluster, tmp_path: Path) -> None:
    """Straight from the cluster's own account of its nodes: a live node is where the resume goes; a
    node Ray does not count alive, or a first run never placed, is said in one line, and no node is
    chosen."""
    from pilothouse.core.dispatch.runs import Launch
    from pilothouse.core.executor.placement import Placement, SandboxGone

    launch = Launch(run_id="r2", job="j", task="t", role="builder", provider="sim", mode="resume", workdir="/",
                    task_text="", resume_of="r1")
    [live] = [n for n, is_worker in cluster.node_ids().items() if is_worker]
    ray.init(address=cluster.address, namespace="placeholder", logging_level="ERROR", log_to_driver=False)
    try:
        placement = Placement()
        assert placement.sandbox_node(ray, launch, {"node_id": live, "hostname": "h"}) == live
        with pytest.raises(SandboxGone, match=r"^the node gone-host \(0123456789ab\), which holds the sandbox of "
                                              r"run r1 whose session this resume continues, is gone: the builder "
                                              r"starts again, fresh, on a live node$"):
            placement.sandbox_node(ray, launch, {"node_id": "0123456789ab" * 4, "hostname": "gone-host"})
        with pytest.raises(SandboxGone, match=r"^run r1, whose session this resume continues, was never placed"):
            placement.sandbox_node(ray, launch, None)
    finally:
        ray.shutdown()
