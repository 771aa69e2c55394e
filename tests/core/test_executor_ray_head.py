"""A job on a loopback cluster whose head is started again while a builder runs there: without Ray's
fault tolerance that is a new cluster, and the supervisor (a driver joined to the old one, whose
calls would never end) says so in one line, joins the new head, and the job finishes with each task
merged once once the worker node has joined it too. The module has its own cluster: its test
restarts it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core import demo
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from ray_cluster import ONE_NOTE_PLAN, WAIT_FOR_GO, Cluster, cluster_up, err_of, ray_project, say_go
from support import Events, until

try:
    import ray  # noqa: F401
except ImportError:  # scripts/test installs the [ray] extra: a missing Ray is a broken setup, never a skip
    pytest.fail("the Ray executor's tests need Ray: pip install -e '.[dev,ray]' (scripts/test does)", pytrace=False)

pytestmark = pytest.mark.slow
cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)

# the builder waits for the word `go` in its checkout, which the test says only to the run it wants
# to finish (the one on the new cluster), then writes the note
WAITS_FOR_THE_WORD = """name: waits-for-the-word
description: "a builder that waits until the test says go"
scripts:
""" + ONE_NOTE_PLAN + """  - match:
      mode: code
    turns:
""" + WAIT_FOR_GO + """      - say: "Writing the note."
        actions:
          - write: {path: notes/first.txt, content: "first\\n"}
      - say: |
          Wrote the note.
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_job_goes_on_when_the_clusters_head_is_started_again_and_merges_each_task_once(
        cluster: Cluster, tmp_path: Path) -> None:
    scenario = tmp_path / "waits-for-the-word.yaml"
    scenario.write_text(WAITS_FOR_THE_WORD)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    ray_project(layout, cluster)
    ev = Events(layout, timeout=180)
    supervisor_ctl.start(layout)
    try:
        first = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        until((cluster.node_home / "pilothouse" / "state" / "logs" / "sim" / f"{first['run']}.jsonl").exists,
              "the builder never started on the worker node", every=0.1)
        cluster.restart_head()
        cluster.restart_worker()
        lost = ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == first["run"])
        again = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first" and e["run"] != first["run"])
        say_go(again)
        ev.wait(lambda e: e["type"] == "job.accepted", timeout=300)
    finally:
        supervisor_ctl.stop(layout)
    said = err_of(layout, first["run"])
    assert f"the Ray head at {cluster.address} (ray.address) was started again, which makes a new cluster: run " \
           f"{first['run']}'s actor went with the old one" in said, said
    assert said.count("was started again") == 1, said
    assert lost["data"]["verdict"] == "error"
    [restarting] = [e for e in ev.seen if e["type"] == "supervisor.restarting"]
    assert restarting["data"]["reason"] == (f"the Ray head at {cluster.address} (ray.address) was started again: "
                                            "the supervisor starts again to join the new cluster")
    pids = [e["data"]["pid"] for e in ev.seen if e["type"] == "supervisor.started"]
    assert len(pids) == 2 and pids[0] == pids[1] == restarting["data"]["pid"], pids  # exec'd: `supervisor stop` finds it
    conn = store.connect(layout.state_db, readonly=True)
    try:
        tasks = {r["task"]: r["state"] for r in conn.execute("SELECT task, state FROM tasks")}
    finally:
        conn.close()
    assert tasks == {"first": "done"}, tasks
    merged = [e["task"] for e in ev.seen if e["type"] == "merge.finished" and e["data"].get("ok")]
    assert merged == ["first"], merged
