"""The Ray executor, end to end: a two-node Ray cluster on loopback (a head and one worker node,
separate processes with separate temp and home dirs), a sim job whose builders are placed on the
worker node, the supervisor SIGKILLed (and later stopped) while a builder runs there and started
again, and the job accepted with every task merged exactly once; the run's key crosses only sealed;
a hostile builder there ends as one here; aborting kills the run on its node."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from ray_cluster import ONE_NOTE_PLAN, SLOW_BUILDER, Cluster, cluster_up, free_port, ray_project
from support import Events, git, until

try:
    import ray
except ImportError:  # scripts/test installs the [ray] extra: a missing Ray is a broken setup, never a skip
    pytest.fail("the Ray executor's tests need Ray: pip install -e '.[dev,ray]' (scripts/test does)", pytrace=False)

pytestmark = pytest.mark.slow
cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)
SECRET = "sk-sim-" + "7f3a9c" * 6  # the sim provider's key for the job: it must cross only sealed


def _holders_of(secret: bytes) -> list[str]:
    """Processes whose argv or environment carries `secret`, outside a worker's sandbox."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = Path(entry.path, "cmdline").read_bytes() + Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if secret in seen and not _sandboxed(int(entry.name)):
            found.append(Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
    return found


def _sandboxed(pid: int) -> bool:
    """Whether `pid` runs under bubblewrap (the runner, which is given the key to use it)."""
    while pid > 1:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap":
                return True
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(raw[raw.rfind(")") + 2:].split()[1])
    return False


def _files_holding(root: Path, secret: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size < (256 << 20) \
                    and secret in path.read_bytes():
                hits.append(str(path))
        except OSError:
            continue
    return hits


def _slow_second(tmp_path: Path) -> Path:
    """demo-recovery, its second builder slow enough to be adopted while it runs."""
    from pilothouse.providers.paths import package_data

    data = yaml.safe_load((package_data() / "scenarios" / "demo-recovery.yaml").read_text())
    second = next(s for s in data["scripts"] if "task: second" in s["match"].get("contains", []))
    second["turns"][0]["delay_s"] = 15
    path = tmp_path / "demo-recovery-slow.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _wait_for_file(path: Path, why: str) -> None:
    until(path.exists, why, every=0.1)


def _sigkill(pid: int) -> None:
    from pilothouse.core.dispatch import runs

    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while runs.process_matches(pid, None) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_job_on_the_cluster_survives_a_killed_supervisor_and_merges_each_task_once(
        cluster: Cluster, tmp_path: Path) -> None:
    from pilothouse.providers import keys

    keys.set_key("sim", SECRET, use_backend="file")
    layout = demo.prepare(tmp_path / "repo", str(_slow_second(tmp_path)))
    ray_project(layout, cluster)
    ev = Events(layout, timeout=90)
    pid = supervisor_ctl.start(layout)
    holders: list[str] = []
    node_logs = cluster.node_home / "pilothouse" / "state" / "logs" / "sim"
    adopted = {}
    try:
        for task, wait_for_end in (("first", True), ("second", False)):
            # the supervisor dies (then stops, as `job stop` does) while the task's builder runs on the node
            placed = ev.wait(lambda e, t=task: e["type"] == "run.placed" and e["task"] == t)
            _wait_for_file(node_logs / f"{placed['run']}.jsonl", f"the {task} builder never started on the node")
            holders += _holders_of(SECRET.encode())
            if wait_for_end:
                _sigkill(pid)
            else:
                assert supervisor_ctl.stop(layout)
            if wait_for_end:  # its run ends while no supervisor watches: the next one collects it
                _wait_for_file(node_logs / f"{placed['run']}.verdict.json", f"the {task} builder never ended")
            else:  # still going when the next one starts: it is adopted while it runs
                assert not (node_logs / f"{placed['run']}.verdict.json").exists()
            adopted[task] = placed["run"]
            pid = supervisor_ctl.start(layout)
        ev.wait(lambda e: e["type"] == "job.accepted", timeout=120)
    finally:
        supervisor_ctl.stop(layout)

    conn = store.connect(layout.state_db, readonly=True)
    tasks = {r["task"]: r["state"] for r in conn.execute("SELECT * FROM tasks")}
    builder_runs = [dict(r) for r in conn.execute("SELECT task, attempt, count(*) AS n FROM runs"
                                                  " WHERE role='builder' GROUP BY task, attempt")]
    conn.close()
    assert tasks == {"first": "done", "second": "done"}
    assert sorted(r["task"] for r in builder_runs) == ["first", "second"] and all(r["n"] == 1 for r in builder_runs)
    # the killed and the stopped supervisor's runs were adopted on the cluster, not run again
    for run_id in adopted.values():
        assert f"adopted run {run_id} on the cluster" in layout.supervisor_log.read_text()
    # each builder ran on the worker node, in its own checkout under that node's data dir
    workers = [n for n, is_worker in cluster.node_ids().items() if is_worker]
    placements = [e for e in ev.seen if e["type"] == "run.placed"]
    assert {e["task"] for e in placements} == {"first", "second"}
    for e in placements:
        assert [e["data"]["node_id"]] == workers
        assert Path(e["data"]["workdir"]).is_relative_to(cluster.node_home / "pilothouse" / "data" / "nodes")
    # every task branch is merged exactly once on the integration branch's first-parent line
    merges = git(layout.root, "log", "--first-parent", "--merges", "--format=%H %P", "pilothouse/integration/demo")
    for task in ("first", "second"):
        tip = git(layout.root, "rev-parse", f"ph/demo/{task}")
        assert sum(1 for line in merges.splitlines() if line.split()[2:] == [tip]) == 1, task
    assert git(layout.root, "show", "pilothouse/integration/demo:notes/second.txt") == "second"
    # the key crossed sealed: in no file Ray kept on either node (logs, spilled objects), in no
    # argv or environment but the sandboxed runner's, in none of the supervisor's records
    assert holders == []
    for root in (*cluster.temps, layout.ai, cluster.node_home / "pilothouse" / "state"):
        assert _files_holding(root, SECRET.encode()) == [], root


HOSTILE = """name: hostile-builder
description: "a builder that links out of its checkout and claims a file it never wrote"
scripts:
""" + ONE_NOTE_PLAN + """  - match:
      mode: code
    turns:
      - say: "Writing the note, and a link to something of the operator's."
        actions:
          - bash: {command: "mkdir -p notes && printf 'first\\n' > notes/first.txt && ln -s OUTSIDE notes/escape"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt","notes/claimed.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _run_job(layout: RepoLayout) -> dict[str, Any]:
    """Run the job to its end; what it left: the builder's verdict, the task, the merged notes."""
    ev = Events(layout, timeout=90)
    supervisor_ctl.start(layout)
    try:
        ev.wait(lambda e: e["type"] == "job.accepted", timeout=120)
    finally:
        supervisor_ctl.stop(layout)
    conn = store.connect(layout.state_db, readonly=True)
    run = conn.execute("SELECT verdict FROM runs WHERE role='builder'").fetchone()
    task = conn.execute("SELECT state FROM tasks WHERE task='first'").fetchone()
    conn.close()
    verdict = json.loads(run["verdict"])
    return {"verdict": (verdict["verdict"], verdict["reason"]), "task": task["state"],
            "notes": git(layout.root, "ls-tree", "-r", "pilothouse/integration/demo", "--", "notes")}


def test_a_hostile_builder_on_the_cluster_is_treated_exactly_as_one_here(cluster: Cluster, tmp_path: Path) -> None:
    outside = tmp_path / "operator-secret.txt"
    outside.write_text("the operator's\n")
    scenario = tmp_path / "hostile-builder.yaml"
    scenario.write_text(HOSTILE.replace("OUTSIDE", str(outside)))
    ended = {}
    for where, on in (("here", None), ("cluster", cluster)):
        layout = demo.prepare(tmp_path / where, str(scenario))
        ray_project(layout, on)
        ended[where] = _run_job(layout)
        if on is not None:
            assert git(layout.root, "for-each-ref", "refs/pilothouse") == ""  # the run's refs are dropped
    assert ended["cluster"] == ended["here"]
    assert ended["here"]["verdict"] == (
        "partial", "files_changed names notes/claimed.txt, which the run did not change "
                   "(it changed notes/escape, notes/first.txt)")
    link = [line for line in ended["here"]["notes"].splitlines() if line.endswith("notes/escape")]
    assert link and link[0].startswith("120000 blob")  # merged as the link it is, never as what it points at
    assert outside.read_text() == "the operator's\n"


@pytest.mark.parametrize("how", ["abort", "job cancel", "actor killed"])
def test_aborting_a_cluster_run_kills_its_dispatch_on_the_node_and_its_actor(cluster: Cluster, tmp_path: Path,
                                                                               how: str) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor.run_record import namespace_of
    from pilothouse.core.upkeep import ending

    scenario = tmp_path / "slow-builder.yaml"
    scenario.write_text(SLOW_BUILDER)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    ray_project(layout, cluster)
    ev = Events(layout, timeout=90)
    supervisor_ctl.start(layout)
    try:
        placed = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        run_id = placed["run"]
        until(lambda: runs.find_dispatch_pid(run_id) is not None,  # the node's dispatch, by its --run-id
              "the dispatch started on the node", every=0.1)
        # what the worker does shows here while it runs, as a local run's does (the supervisor tails it)
        here = runs.provider_logs("sim", run_id)["jsonl"]
        until(lambda: here.is_file() and "Looking first." in here.read_text(),
              "the run's activity reached this machine while it ran", every=0.1)
        if how == "abort":
            assert supervisor_ctl.abort_run(layout, run_id, grace=2.0)
        elif how == "actor killed":  # as a cancel that timed out ends, or a crashed actor: the dispatch ends too
            cluster.kill_actor(placed["data"]["actor"], namespace_of(layout))
        else:
            supervisor_ctl.stop(layout)  # as `job cancel` does: the supervisor is paused meanwhile
            assert ending.cancel_job(layout, demo.JOB)["runs"] == [run_id]
        finished = ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == run_id, timeout=60)
    finally:
        supervisor_ctl.stop(layout)
        if how == "actor killed":  # a crashed run is retried: the retry's detached actor would hold the node
            ending.cancel_job(layout, demo.JOB)
        # `job cancel` joined the cluster from this process, as the CLI's does from its own: left
        # joined, the next test here would find Ray initialized, and Ray's threads crash this process
        # once the cluster is stopped
        ray.shutdown()
    assert runs.find_dispatch_pid(run_id) is None
    assert not cluster.actor_alive(placed["data"]["actor"], namespace_of(layout))
    assert finished["data"]["verdict"] == "error"
    # a run that never landed leaves nothing on the hub or in the repository
    for where in (layout.root, layout.root / ".ai" / "hub.git"):
        assert run_id not in git(where, "for-each-ref", "refs/pilothouse"), where


def test_what_ray_serializes_for_a_runs_start_holds_its_key_only_sealed_to_its_actor(tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor
    from pilothouse.core.executor.seal import open_sealed
    from pilothouse.providers import keys

    keys.set_key("sim", SECRET, use_backend="file")
    layout = RepoLayout(tmp_path)
    launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                         workdir=str(tmp_path), task_text="task: t\n", scenario="code-basic")
    actor = RunActor("ns", "r-1")  # the class Ray runs on the node, here in this process
    args = RayExecutor(layout).start_args(launch, {"hub": "/hub.git", "base": "0" * 40}, actor._public, 10)
    assert SECRET.encode() not in ray.cloudpickle.dumps(args)
    assert json.loads(open_sealed(actor._private, args[3], "r-1")) == {"key": SECRET}
    with pytest.raises(ValueError):
        open_sealed(RunActor("ns", "r-2")._private, args[3], "r-1")  # another run's actor cannot


PROTECTED_WRITE = """name: protected-write
description: "a builder that rewrites pytest.ini beside its note"
scripts:
  - match:
      mode: code
    turns:
      - say: "Writing the note, and relaxing pytest's settings."
        actions:
          - bash: {command: "mkdir -p notes && printf 'first\\\\n' > notes/first.txt; printf '[pytest]\\\\naddopts = -p no:x\\\\n' > pytest.ini"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_node_confines_its_run_by_the_supervisors_settings_not_the_checkouts_committed_ones(
        git_repo: Path, tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor import hub
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor

    (git_repo / "pytest.ini").write_text("[pytest]\n")
    git(git_repo, "add", "pytest.ini")
    git(git_repo, "commit", "-qm", "pytest settings")
    base = git(git_repo, "rev-parse", "HEAD")
    # the operator's project file protects pytest.ini, but is not committed: a node's checkout lacks it
    layout = RepoLayout(git_repo)
    layout.project_yaml.parent.mkdir(parents=True, exist_ok=True)
    layout.project_yaml.write_text("gates:\n  protected: [pytest.ini]\n")
    scenario = tmp_path / "protected-write.yaml"
    scenario.write_text(PROTECTED_WRITE)
    url = str(tmp_path / "hub.git")
    hub.ensure_hub(layout, url)
    hub.push_base(layout, url, base, "r-1")
    launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                         workdir=str(git_repo), task_text="task: write the note\n", scenario=str(scenario))
    actor = RunActor("ns", "r-1")  # the class Ray runs on the node, here in this process
    outcome = actor._dispatch(*RayExecutor(layout).start_args(launch, {"hub": url, "base": base}, actor._public, 10))
    assert outcome["pushed"]
    git(git_repo, "fetch", "-q", url, hub.result_ref("r-1"))
    changed = git(git_repo, "diff", "--name-only", base, "FETCH_HEAD").splitlines()
    assert changed == ["notes/first.txt"]  # the write to pytest.ini failed in the node's sandbox


def test_a_task_text_holding_a_configured_key_is_refused_before_it_crosses_the_cluster(tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor
    from pilothouse.providers import keys
    from pilothouse.providers.errors import UserError

    other = "sk-" + "9b1e4d" * 8  # another provider's key: the node's dispatch, which knows only its run's, would pass it
    keys.set_key("sim", SECRET, use_backend="file")
    keys.set_key("glm", other, use_backend="file")
    launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                         workdir=str(tmp_path), task_text=f"task: t\nuse {other} for the calls\n", scenario="code-basic")
    with pytest.raises(UserError) as refused:
        RayExecutor(RepoLayout(tmp_path)).start_args(launch, {"hub": "/hub.git", "base": "0" * 40},
                                                     RunActor("ns", "r-1")._public, 10)
    assert "the task text of run r-1 contains" in str(refused.value) and other not in str(refused.value)


def test_a_real_head_answers_the_check_in_rays_protocol(cluster: Cluster) -> None:
    from pilothouse.core.records.check import ray_head_unanswered

    assert ray_head_unanswered(cluster.address) is None


def test_joining_a_cluster_nothing_answers_at_names_ray_address_at_once() -> None:
    from pilothouse.core.executor.cluster import connect
    from pilothouse.providers.errors import UserError

    address = f"127.0.0.1:{free_port()}"  # closed again: nothing listens there
    assert not ray.is_initialized()  # else connect would not join again
    with pytest.raises(UserError) as refused:
        connect(address, "ns")
    assert str(refused.value).startswith(f"ray.address in .ai/project.yaml: no Ray head answers at {address}")
    assert not ray.is_initialized()


PEEK = """name: peek
description: "a builder that copies the operator's untracked .env, by its path on the supervisor's machine"
scripts:
  - match:
      mode: code
    turns:
      - say: "Copying what I can reach."
        actions:
          - bash: {command: "mkdir -p notes && (cat OPERATOR/.env || echo unreadable) > notes/leak.txt 2>&1"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["notes/leak.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_node_sharing_the_filesystem_hides_the_operators_checkout_from_its_run(tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor import hub
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor

    # outside /tmp: a sandbox's /tmp is its own, which would hide a checkout there anyway
    repo = Path(tempfile.mkdtemp(prefix="ph-operator-", dir="/var/tmp"))
    try:
        (repo / "README.md").write_text("# project\n")
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "initial")
        (repo / ".env").write_text("DB_PASSWORD=operator-only\n")  # untracked: never in a base commit
        layout = RepoLayout(repo)
        base = git(repo, "rev-parse", "HEAD")
        scenario = tmp_path / "peek.yaml"
        scenario.write_text(PEEK.replace("OPERATOR", str(repo)))
        url = str(tmp_path / "hub.git")
        hub.ensure_hub(layout, url)
        hub.push_base(layout, url, base, "r-1")
        launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                             workdir=str(repo), task_text="task: write the note\n", scenario=str(scenario))
        actor = RunActor("ns", "r-1")
        outcome = actor._dispatch(*RayExecutor(layout).start_args(launch, {"hub": url, "base": base},
                                                                  actor._public, 10))
        assert outcome["pushed"]
        git(repo, "fetch", "-q", url, hub.result_ref("r-1"))
        leak = git(repo, "show", "FETCH_HEAD:notes/leak.txt")
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    assert "operator-only" not in leak and "unreadable" in leak


def test_a_node_that_cannot_reach_the_hub_says_so_in_one_line_naming_ray_hub(tmp_path: Path) -> None:
    from pilothouse.core.executor.node import RunActor
    from pilothouse.core.executor.seal import seal
    from pilothouse.providers.errors import UserError

    actor = RunActor("ns", "r-1")
    spec = {"run_id": "r-1", "job": "j", "task": "t", "role": "builder", "provider": "sim", "mode": "code",
            "workdir": "/elsewhere", "task_text": "task: t\n", "scenario": "code-basic"}
    hub_url = str(tmp_path / "not-on-this-node.git")
    with pytest.raises(UserError) as refused:
        actor._dispatch(spec, hub_url, "0" * 40, seal(actor._public, b'{"key": null}', "r-1"), 10)
    message = str(refused.value)
    assert message.startswith("ray.hub in .ai/project.yaml: node ") and f"cannot fetch from the hub {hub_url}" in message
    assert "\n" not in message


PLANT = """name: plant
description: "a builder that plants in its node's shared object store what the next run's checkout would pick up"
scripts:
  - match:
      mode: code
    turns:
      - say: "Planting."
        actions:
          - bash: {command: "mkdir -p notes; c=$(git rev-parse --git-common-dir); g=$(git rev-parse --git-dir); for f in $c/config $c/hooks/post-checkout $c/objects/info/alternates $c/refs/pilothouse/base/r-2 $g/HEAD $g/config.worktree; do (echo planted >> $f) 2>/dev/null && echo \\"wrote $f\\" >> notes/planted.txt; done; echo done >> notes/planted.txt"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["notes/planted.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_builder_cannot_plant_anything_in_its_nodes_shared_object_store(git_repo: Path, tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor import hub
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor, node_root

    layout = RepoLayout(git_repo)
    base = git(git_repo, "rev-parse", "HEAD")
    scenario = tmp_path / "plant.yaml"
    scenario.write_text(PLANT)
    url = str(tmp_path / "hub.git")
    hub.ensure_hub(layout, url)
    hub.push_base(layout, url, base, "r-1")
    launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                         workdir=str(git_repo), task_text="task: write the note\n", scenario=str(scenario))
    actor = RunActor("ns", "r-1")
    outcome = actor._dispatch(*RayExecutor(layout).start_args(launch, {"hub": url, "base": base}, actor._public, 10))
    assert outcome["pushed"]
    git(git_repo, "fetch", "-q", url, hub.result_ref("r-1"))
    assert git(git_repo, "show", "FETCH_HEAD:notes/planted.txt") == "done"  # every write was refused
    cache = node_root("ns", "r-1").parent / "cache.git"
    assert "planted" not in (cache / "config").read_text()
    assert not (cache / "objects" / "info" / "alternates").exists()
    assert not (cache / "hooks" / "post-checkout").exists()
    assert git(cache, "for-each-ref", "refs/pilothouse") == ""


def test_a_run_cancelled_while_its_checkout_is_made_never_starts_its_dispatch(git_repo: Path, tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor import hub
    from pilothouse.core.executor.cluster import RayExecutor
    from pilothouse.core.executor.node import RunActor

    layout = RepoLayout(git_repo)
    base = git(git_repo, "rev-parse", "HEAD")
    url = str(tmp_path / "hub.git")
    hub.publish_base(layout, url, base, "r-1")
    launch = runs.Launch(run_id="r-1", job="j", task="t", role="builder", provider="sim", mode="code",
                         workdir=str(git_repo), task_text="task: t\n", scenario="code-basic")
    actor = RunActor("ns", "r-1")
    args = RayExecutor(layout).start_args(launch, {"hub": url, "base": base}, actor._public, 10)
    assert actor.cancel(0.5) is False  # nothing to interrupt yet: the actor is killed next
    with pytest.raises(RuntimeError, match="cancelled before its dispatch started"):
        actor._dispatch(*args)
    assert not (actor.root / "out").read_bytes()
