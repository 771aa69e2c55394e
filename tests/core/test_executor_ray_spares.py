"""Run actors made ahead (core/executor/spares.py), on a loopback cluster (a head and one worker
node): a supervisor at work places its later runs on spares it made while earlier ones ran, each
job still merges its task once, and it leaves no spare behind when it stops; the spares a killed
supervisor left are killed by the next one unless a run record names one (a run claimed it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.core import demo
from pilothouse.core.executor.node import RunActor
from pilothouse.core.executor.run_record import namespace_of, record_path
from pilothouse.core.records.jobs import create_job
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from ray_cluster import QUICK_BUILDER, Cluster, cluster_up, ray_project
from support import Events, until

try:
    import ray  # noqa: F401
except ImportError:  # scripts/test installs the [ray] extra: a missing Ray is a broken setup, never a skip
    pytest.fail("the Ray executor's tests need Ray: pip install -e '.[dev,ray]' (scripts/test does)", pytrace=False)

cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)

def _cluster_repo(cluster: Cluster, tmp_path: Path) -> object:
    scenario = tmp_path / "quick-builder.yaml"
    scenario.write_text(QUICK_BUILDER)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    ray_project(layout, cluster)
    return layout


@pytest.mark.slow
def test_a_supervisor_at_work_places_its_later_runs_on_spares_and_leaves_none_when_it_stops(
        cluster: Cluster, tmp_path: Path) -> None:
    layout = _cluster_repo(cluster, tmp_path)
    ev = Events(layout, timeout=120)
    supervisor_ctl.start(layout)
    try:
        ev.wait(lambda e: e["type"] == "job.accepted" and e["job"] == demo.JOB)
        for name in ("again-1", "again-2"):
            # made while the earlier job's run worked, placed once its place on the node was free
            cluster.wait_for_a_spare(namespace_of(layout))
            create_job(layout, name, "Write the note again.")
            ev.wait(lambda e, n=name: e["type"] == "job.accepted" and e["job"] == n)
        spares_before_stop = [n for n in cluster.named_actors(namespace_of(layout)) if n.startswith("spare-")]
    finally:
        supervisor_ctl.stop(layout)
    placed = {e["job"]: e["data"] for e in ev.seen if e["type"] == "run.placed"}
    # each later run claims one, which stays under its own name
    assert placed["again-1"]["spare"] and placed["again-2"]["spare"]
    assert placed["again-1"]["actor"].startswith("spare-") and placed["again-1"]["actor"] != placed["again-2"]["actor"]
    assert spares_before_stop  # kept ready while the supervisor ran
    conn = store.connect(layout.state_db, readonly=True)
    merged = [tuple(r) for r in conn.execute("SELECT job, task, state FROM tasks ORDER BY job")]
    conn.close()
    assert merged == [("again-1", "first", "done"), ("again-2", "first", "done"), (demo.JOB, "first", "done")]
    # every actor is gone: the runs' (killed once landed) and the spares no run claimed
    until(lambda: cluster.named_actors(namespace_of(layout)) == [], "the supervisor's actors gone after it stopped",
          every=0.2)


@pytest.mark.slow
def test_the_spares_a_killed_supervisor_left_are_killed_by_the_next_but_one_a_run_claimed(
        cluster: Cluster, tmp_path: Path) -> None:
    layout = _cluster_repo(cluster, tmp_path)
    namespace = namespace_of(layout)
    cluster.make_spare("spare-left", namespace)
    cluster.make_spare("spare-claimed", namespace)
    # a run that claimed one names it in its record (its supervisor died: the next one adopts it)
    record = record_path(layout, "20261207T000000Z-0000claim")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"hub": "x", "base": "0" * 40, "actor": "spare-claimed"}))
    ev = Events(layout, timeout=120)
    supervisor_ctl.start(layout)
    try:
        ev.wait(lambda e: e["type"] == "job.accepted")
        until(lambda: "spare-left" not in cluster.named_actors(namespace), "the left spare killed", every=0.2)
        assert "spare-claimed" in cluster.named_actors(namespace)
    finally:
        supervisor_ctl.stop(layout)
        cluster.kill_actor("spare-claimed", namespace)


def test_a_spare_starts_no_run_until_one_claims_it_and_is_never_a_second_runs(tmp_path: Path) -> None:
    spare = RunActor("pilothouse-test", None)
    with pytest.raises(RuntimeError, match="claims it"):
        spare.start({"provider": "sim"}, "hub", "0" * 40, b"", 19)
    taken = RunActor("pilothouse-test", "run-one")
    with pytest.raises(RuntimeError, match="run run-one's, not run run-two's"):
        taken.claim("run-two")
