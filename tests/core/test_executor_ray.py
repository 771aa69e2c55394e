"""The Ray executor, end to end: a two-node Ray cluster on loopback (a head and one worker node,
separate processes with separate temp and home dirs), a sim job whose builders are placed on the
worker node, the supervisor SIGKILLed while a builder runs there and started again, and the job
accepted with every task merged exactly once; the run's key crosses only sealed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl

ray = pytest.importorskip("ray", reason="the Ray executor's tests need Ray: pip install 'pilothouse[ray]'")

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))
SECRET = "sk-sim-" + "7f3a9c" * 6  # the sim provider's key for the job: it must cross only sealed


@dataclass
class Cluster:
    address: str
    head: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    temps: tuple[Path, Path]
    node_home: Path  # the worker node's HOME / PILOTHOUSE_HOME: where its runs keep their files

    def node_ids(self) -> dict[str, bool]:
        """node id -> whether it is the worker node (holds the pilothouse_worker resource)."""
        code = ("import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False);"
                "print(json.dumps({n['NodeID']: 'pilothouse_worker' in n['Resources'] for n in ray.nodes()"
                " if n['Alive']}))")
        out = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True, timeout=60,
                             env=_node_env(self.node_home.parent / "driver"), check=True).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))

    def actor_alive(self, name: str, namespace: str) -> bool:
        code = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "try:\n    ray.get_actor(sys.argv[2], namespace=sys.argv[3])\nexcept ValueError:\n    print('gone')\n"
                "else:\n    print('alive')")
        out = subprocess.run([sys.executable, "-c", code, self.address, name, namespace], capture_output=True,
                             text=True, timeout=60, env=_node_env(self.node_home.parent / "driver"), check=True)
        return out.stdout.strip().splitlines()[-1] == "alive"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports() -> list[str]:
    # every port a node opens is picked here: other clusters (other people's tests) run beside ours
    out: list[str] = []
    for flag in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"):
        out += [flag, str(_free_port())]
    return out


def _node_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "PILOTHOUSE_HOME"))}
    env.update(HOME=str(home), PILOTHOUSE_HOME=str(home / "pilothouse"), RAY_USAGE_STATS_ENABLED="0")
    return env


def _session(sid: int) -> list[int]:
    """The processes of session `sid` (`ray start` leads one; every node process stays in it)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if int(raw[raw.rfind(")") + 2:].split()[3]) == sid:
            found.append(int(entry.name))
    return found


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop one node by its session, never `ray stop` (that stops every cluster on the machine)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in _session(proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while _session(proc.pid) and time.monotonic() < deadline:
            proc.poll()
            time.sleep(0.1)
    proc.wait(timeout=5)


def _wait_for(what: str, check: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} not up in {timeout}s")


def _status(address: str, env: dict[str, str]) -> str:
    return subprocess.run([RAY, "status", "--address", address], capture_output=True, text=True, env=env,
                          timeout=60).stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("ray")
    # short: Ray's unix sockets live under the temp dir, and their paths must fit in 107 bytes
    temps = (Path(tempfile.mkdtemp(prefix="rh", dir="/tmp")), Path(tempfile.mkdtemp(prefix="rw", dir="/tmp")))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--object-store-memory", str(100 << 20),
              "--block", "--disable-usage-stats"]
    head_env = _node_env(base / "head")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        head = subprocess.Popen([RAY, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                                 "--dashboard-port", str(_free_port()), "--temp-dir", str(temps[0]),
                                 "--object-spilling-directory", str(temps[0] / "spill"), *common, *_ports()],
                                env=head_env, cwd=base, stdout=open(base / "head.out", "wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(head)
        _wait_for("the head", lambda: "Node status" in _status(address, head_env))
        node_home = base / "worker"
        worker = subprocess.Popen([RAY, "start", "--address", address, "--resources", '{"pilothouse_worker": 1}',
                                   "--temp-dir", str(temps[1]), "--object-spilling-directory",
                                   str(temps[1] / "spill"), *common, *_ports()],
                                  env=_node_env(node_home), cwd=node_home, stdout=open(base / "worker.out", "wb"),
                                  stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(worker)
        _wait_for("the worker node", lambda: "pilothouse_worker" in _status(address, head_env))
        yield Cluster(address, head, worker, temps, node_home)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Events:
    def __init__(self, layout: RepoLayout) -> None:
        from pilothouse.core.state.events import EventTailer

        self.tailer = EventTailer(layout.events)
        self.seen: list[dict[str, Any]] = []

    def wait(self, pred: Any, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.tailer.read_new():
                self.seen.append(ev)
                if pred(ev):
                    return ev
            time.sleep(0.05)
        raise AssertionError(f"event not seen in {timeout}s; last: {[e['type'] for e in self.seen[-8:]]}")


def _ray_project(layout: RepoLayout, cluster: Cluster | None, **extra: Any) -> None:
    """Review off and a gate the notes pass; the builders on the cluster's worker node (None: here)."""
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "test -s notes/first.txt", "full": "test -s notes/first.txt"}
    if cluster is not None:
        data["executor"] = "ray"
        data["ray"] = {"address": cluster.address, "resources": {"pilothouse_worker": 1}}
    data.update(extra)
    layout.project_yaml.write_text(yaml.safe_dump(data))
    _git(layout.root, "commit", "-qam", "run the builders on the cluster")


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


def test_a_job_on_the_cluster_survives_a_killed_supervisor_and_merges_each_task_once(
        cluster: Cluster, tmp_path: Path) -> None:
    from pilothouse.providers import keys

    keys.set_key("sim", SECRET, use_backend="file")
    layout = demo.prepare(tmp_path / "repo", "demo-recovery")
    _ray_project(layout, cluster)
    ev = Events(layout)
    pid = supervisor_ctl.start(layout)
    holders: list[str] = []
    try:
        # the supervisor dies while the first builder runs on the worker node
        placed = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        deadline = time.monotonic() + 30
        while not (cluster.node_home / "pilothouse" / "state" / "logs" / "sim" / f"{placed['run']}.jsonl").exists():
            assert time.monotonic() < deadline, "the first builder never started on the worker node"
            time.sleep(0.1)
        holders += _holders_of(SECRET.encode())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = supervisor_ctl.start(layout)
        ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "second")
        holders += _holders_of(SECRET.encode())
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
    # the killed supervisor's run was adopted on the cluster, not run again
    assert f"adopted run {placed['run']} on the cluster" in layout.supervisor_log.read_text()
    # each builder ran on the worker node, in its own checkout under that node's data dir
    workers = [n for n, is_worker in cluster.node_ids().items() if is_worker]
    placements = [e for e in ev.seen if e["type"] == "run.placed"]
    assert {e["task"] for e in placements} == {"first", "second"}
    for e in placements:
        assert [e["data"]["node_id"]] == workers
        assert Path(e["data"]["workdir"]).is_relative_to(cluster.node_home / "pilothouse" / "data" / "nodes")
    # every task branch is merged exactly once on the integration branch's first-parent line
    merges = _git(layout.root, "log", "--first-parent", "--merges", "--format=%H %P", "pilothouse/integration")
    for task in ("first", "second"):
        tip = _git(layout.root, "rev-parse", f"ph/demo/{task}")
        assert sum(1 for line in merges.splitlines() if line.split()[2:] == [tip]) == 1, task
    assert _git(layout.root, "show", "pilothouse/integration:notes/second.txt") == "second"
    # the key crossed sealed: in no file Ray kept on either node (logs, spilled objects), in no
    # argv or environment but the sandboxed runner's, in none of the supervisor's records
    assert holders == []
    for root in (*cluster.temps, layout.ai, cluster.node_home / "pilothouse" / "state"):
        assert _files_holding(root, SECRET.encode()) == [], root


HOSTILE = """name: hostile-builder
description: "a builder that links out of its checkout and claims a file it never wrote"
scripts:
  - match:
      mode: plan
    turns:
      - say: |
          One step.
          <!--RESULT-->{"tasks": [
          {"id": "first", "title": "Write the first note", "description": "Create notes/first.txt.", "kind": "CONTRACT_CHANGE", "expected_paths": {"read": [], "write": ["notes/first.txt"]}, "depends_on": [], "acceptance": ["notes/first.txt exists"], "complexity": "easy"}
          ]}<!--/RESULT-->
  - match:
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
    ev = Events(layout)
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
            "notes": _git(layout.root, "ls-tree", "-r", "pilothouse/integration", "--", "notes")}


def test_a_hostile_builder_on_the_cluster_is_treated_exactly_as_one_here(cluster: Cluster, tmp_path: Path) -> None:
    outside = tmp_path / "operator-secret.txt"
    outside.write_text("the operator's\n")
    scenario = tmp_path / "hostile-builder.yaml"
    scenario.write_text(HOSTILE.replace("OUTSIDE", str(outside)))
    ended = {}
    for where, on in (("here", None), ("cluster", cluster)):
        layout = demo.prepare(tmp_path / where, str(scenario))
        _ray_project(layout, on)
        ended[where] = _run_job(layout)
        if on is not None:
            assert _git(layout.root, "for-each-ref", "refs/pilothouse") == ""  # the run's refs are dropped
    assert ended["cluster"] == ended["here"]
    assert ended["here"]["verdict"] == (
        "partial", "files_changed names notes/claimed.txt, which the run did not change "
                   "(it changed notes/escape, notes/first.txt)")
    link = [line for line in ended["here"]["notes"].splitlines() if line.endswith("notes/escape")]
    assert link and link[0].startswith("120000 blob")  # merged as the link it is, never as what it points at
    assert outside.read_text() == "the operator's\n"


SLOW = """name: slow-builder
description: "a builder that takes its time"
scripts:
  - match:
      mode: plan
    turns:
      - say: |
          One step.
          <!--RESULT-->{"tasks": [
          {"id": "first", "title": "Write the first note", "description": "Create notes/first.txt.", "kind": "CONTRACT_CHANGE", "expected_paths": {"read": [], "write": ["notes/first.txt"]}, "depends_on": [], "acceptance": ["notes/first.txt exists"], "complexity": "easy"}
          ]}<!--/RESULT-->
  - match:
      mode: code
    turns:
      - say: "Thinking for a long while."
        delay_s: 120
      - say: "Done."
"""


def test_aborting_a_cluster_run_kills_its_dispatch_on_the_node_and_its_actor(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    from pilothouse.core.dispatch import runs
    from pilothouse.core.executor.cluster import actor_name, namespace_of

    scenario = tmp_path / "slow-builder.yaml"
    scenario.write_text(SLOW)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _ray_project(layout, cluster)
    ev = Events(layout)
    supervisor_ctl.start(layout)
    try:
        placed = ev.wait(lambda e: e["type"] == "run.placed" and e["task"] == "first")
        run_id = placed["run"]
        deadline = time.monotonic() + 30
        while runs.find_dispatch_pid(run_id) is None:  # the node's dispatch, by its --run-id
            assert time.monotonic() < deadline, "the dispatch never started on the node"
            time.sleep(0.1)
        assert supervisor_ctl.abort_run(layout, run_id, grace=2.0)
        finished = ev.wait(lambda e: e["type"] == "run.finished" and e["run"] == run_id, timeout=60)
    finally:
        supervisor_ctl.stop(layout)
    assert runs.find_dispatch_pid(run_id) is None
    assert not cluster.actor_alive(actor_name(run_id), namespace_of(layout))
    assert finished["data"]["verdict"] == "error"
