"""A Ray cluster on loopback for the executor's tests (`from ray_cluster import …`): each node a
`ray start --block` process of its own, with its own temp dir, home and ports, stopped by its
session (never `ray stop`, which stops every cluster on the machine)."""

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core.records.layout import RepoLayout
from support import git, guard, until

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class Cluster:
    address: str
    head: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    temps: tuple[Path, Path]
    node_home: Path  # the worker node's HOME / PILOTHOUSE_HOME: where its runs keep their files
    head_argv: list[str] = field(default_factory=list)
    head_env: dict[str, str] = field(default_factory=dict)

    def restart_head(self) -> None:
        """The head stopped and started again on its port: without GCS fault tolerance, a new cluster."""
        stop(self.head)
        until(lambda: not port_open(self.address), "the old head gone from its port", every=0.2)
        # a fresh temp dir: in the old one Ray finds the old head's address, and a raylet of this
        # machine (the loopback worker node's) still naming it makes it refuse: "already running"
        old = str(self.temps[0])
        temp = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
        self.temps = (temp, self.temps[1])
        argv = [str(temp) if a == old else str(temp / "spill") if a == f"{old}/spill" else a for a in self.head_argv]
        base = self.node_home.parent
        self.head = subprocess.Popen(argv, env=self.head_env, cwd=base, stdout=open(base / "head.out", "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_for("the head, started again", lambda: "Node status" in status(self.address, self.head_env))

    def restart_worker(self) -> None:
        """The worker node stopped and joined (the new head) again, as docs/executors.md says to."""
        stop(self.worker)
        self.worker = start_worker(self.address, self.node_home, self.temps[1], {"pilothouse_worker": 1})
        wait_for("the worker node, joined again", lambda: "pilothouse_worker" in status(self.address, self.head_env))

    def node_ids(self) -> dict[str, bool]:
        """node id -> whether it is the worker node (holds the pilothouse_worker resource)."""
        code = ("import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False);"
                "print(json.dumps({n['NodeID']: 'pilothouse_worker' in n['Resources'] for n in ray.nodes()"
                " if n['Alive']}))")
        out = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True, timeout=guard(60),
                             env=node_env(self.node_home.parent / "driver"), check=True).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))

    def actor_alive(self, name: str, namespace: str) -> bool:
        code = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "try:\n    ray.get_actor(sys.argv[2], namespace=sys.argv[3])\nexcept ValueError:\n    print('gone')\n"
                "else:\n    print('alive')")
        out = subprocess.run([sys.executable, "-c", code, self.address, name, namespace], capture_output=True,
                             text=True, timeout=guard(60), env=node_env(self.node_home.parent / "driver"), check=True)
        return out.stdout.strip().splitlines()[-1] == "alive"

    def named_actors(self, namespace: str) -> list[str]:
        """The names of the live actors of `namespace`."""
        code = ("import json, sys, ray; ray.init(address=sys.argv[1], namespace=sys.argv[2], logging_level='ERROR',"
                " log_to_driver=False)\nfrom ray.util import list_named_actors\nprint(json.dumps(list_named_actors()))")
        out = subprocess.run([sys.executable, "-c", code, self.address, namespace], capture_output=True, text=True,
                             timeout=guard(60), env=node_env(self.node_home.parent / "driver"), check=True)
        return list(json.loads(out.stdout.strip().splitlines()[-1]))

    def wait_for_a_spare(self, namespace: str) -> str:
        """Until a spare actor of `namespace` is placed and made (it answers): its name."""
        code = ("import sys, ray; ray.init(address=sys.argv[1], namespace=sys.argv[2], logging_level='ERROR',"
                " log_to_driver=False)\nfrom ray.util import list_named_actors\nimport time\n"
                "while True:\n    names = [n for n in list_named_actors() if n.startswith('spare-')]\n"
                "    refs = {ray.get_actor(n).hello.remote(): n for n in names}\n"
                "    ready, _ = ray.wait(list(refs), num_returns=1, timeout=1) if refs else ([], [])\n"
                "    if ready:\n        print(refs[ready[0]]); break\n    time.sleep(0.2)")
        out = subprocess.run([sys.executable, "-c", code, self.address, namespace], capture_output=True, text=True,
                             timeout=guard(120), env=node_env(self.node_home.parent / "driver"), check=True)
        return out.stdout.strip().splitlines()[-1]

    def make_spare(self, name: str, namespace: str) -> None:
        """A spare run actor as a supervisor makes one (core/executor/spares.py), left behind by it."""
        code = ("import sys, ray; ray.init(address=sys.argv[1], namespace=sys.argv[3], logging_level='ERROR',"
                " log_to_driver=False)\nfrom pilothouse.core.executor.node import RunActor\n"
                "from pilothouse.core.executor.spares import actor_options\n"
                "a = ray.remote(RunActor).options(**actor_options(sys.argv[3], sys.argv[2], {})).remote(sys.argv[3], None)\n"
                "ray.get(a.hello.remote())")
        subprocess.run([sys.executable, "-c", code, self.address, name, namespace], capture_output=True, text=True,
                       timeout=guard(60), env=node_env(self.node_home.parent / "driver"), check=True)

    def kill_actor(self, name: str, namespace: str) -> None:
        """As Ray does when an actor's process dies: no cancel, nothing the actor can do first."""
        code = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "ray.kill(ray.get_actor(sys.argv[2], namespace=sys.argv[3]))")
        subprocess.run([sys.executable, "-c", code, self.address, name, namespace], capture_output=True,
                       text=True, timeout=guard(60), env=node_env(self.node_home.parent / "driver"), check=True)


COMMON = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--object-store-memory", str(100 << 20),
          "--block", "--disable-usage-stats"]


def start_worker(address: str, home: Path, temp: Path, resources: dict[str, float]) -> subprocess.Popen[bytes]:
    """One worker node joined to `address`, its HOME `home` (where its runs keep their files)."""
    return subprocess.Popen([RAY, "start", "--address", address, "--resources", json.dumps(resources),
                             "--temp-dir", str(temp), "--object-spilling-directory", str(temp / "spill"),
                             *COMMON, *ports()],
                            env=node_env(home), cwd=home, stdout=open(home.parent / f"{home.name}.out", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ports() -> list[str]:
    # every port a node opens is picked here: other clusters (other people's tests) run beside ours
    out: list[str] = []
    for flag in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"):
        out += [flag, str(free_port())]
    return out


def node_env(home: Path) -> dict[str, str]:
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


def stop(proc: subprocess.Popen[bytes]) -> None:
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
    proc.wait(timeout=guard(5))


def wait_for(what: str, check: Any) -> None:
    until(check, f"{what} up", every=0.3)


def status(address: str, env: dict[str, str]) -> str:
    return subprocess.run([RAY, "status", "--address", address], capture_output=True, text=True, env=env,
                          timeout=guard(60)).stdout


def cluster_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head and one worker node offering `pilothouse_worker: 1`; a test module makes it its fixture
    (`cluster = pytest.fixture(scope="module", name="cluster")(cluster_up)`)."""
    base = tmp_path_factory.mktemp("ray")
    # short: Ray's unix sockets live under the temp dir, and their paths must fit in 107 bytes
    temps = (Path(tempfile.mkdtemp(prefix="rh", dir="/tmp")), Path(tempfile.mkdtemp(prefix="rw", dir="/tmp")))
    port = free_port()
    address = f"127.0.0.1:{port}"
    head_env = node_env(base / "head")
    procs: list[subprocess.Popen[bytes]] = []
    made: list[Cluster] = []
    head_argv = [RAY, "start", "--head", "--port", str(port), "--include-dashboard", "false", "--dashboard-port",
                 str(free_port()), "--temp-dir", str(temps[0]), "--object-spilling-directory", str(temps[0] / "spill"),
                 *COMMON, *ports()]
    try:
        head = subprocess.Popen(head_argv, env=head_env, cwd=base, stdout=open(base / "head.out", "wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(head)
        wait_for("the head", lambda: "Node status" in status(address, head_env))
        node_home = base / "worker"
        node_home.mkdir()
        worker = start_worker(address, node_home, temps[1], {"pilothouse_worker": 1})
        procs.append(worker)
        wait_for("the worker node", lambda: "pilothouse_worker" in status(address, head_env))
        made.append(Cluster(address, head, worker, temps, node_home, head_argv, head_env))
        yield made[0]
    finally:
        # a test may have started the head or the worker again: those are the processes to stop
        for proc in reversed([made[0].head, made[0].worker] if made else procs):
            stop(proc)
        for temp in {*temps, *(made[0].temps if made else ())}:
            shutil.rmtree(temp, ignore_errors=True)


def ray_project(layout: RepoLayout, cluster: Cluster | None, **extra: Any) -> None:
    """Review off and a gate the notes pass; the builders on the cluster's worker node (None: here)."""
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "test -s notes/first.txt", "full": "test -s notes/first.txt"}
    if cluster is not None:
        data["executor"] = "ray"
        data["ray"] = {"address": cluster.address, "resources": {"pilothouse_worker": 1}}
    data.update(extra)
    layout.project_yaml.write_text(yaml.safe_dump(data))
    git(layout.root, "commit", "-qam", "run the builders on the cluster")


def err_of(layout: RepoLayout, run_id: str) -> str:
    from pilothouse.core.dispatch import runs

    return Path(runs.run_files(layout, run_id)["err"]).read_text()


# the assigner's plan of the executor tests' scenarios: one task, which writes notes/first.txt
ONE_NOTE_PLAN = """  - match:
      mode: plan
    turns:
      - say: |
          One step.
          <!--RESULT-->{"tasks": [
          {"id": "first", "title": "Write the first note", "description": "Create notes/first.txt.", "kind": "CONTRACT_CHANGE", "expected_paths": {"read": [], "write": ["notes/first.txt"]}, "depends_on": [], "acceptance": ["notes/first.txt exists"], "complexity": "easy"}
          ]}<!--/RESULT-->
"""

# a builder that writes notes/first.txt at once and hands over
QUICK_NOTE = """  - match:
      mode: code
    turns:
      - say: "Writing."
        actions:
          - write: {path: notes/first.txt, content: "first\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["notes/first.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""
QUICK_BUILDER = """name: quick-builder
description: "one task, written at once"
scripts:
""" + ONE_NOTE_PLAN + QUICK_NOTE

SLOW_BUILDER = """name: slow-builder
description: "a builder that takes its time"
scripts:
""" + ONE_NOTE_PLAN + """  - match:
      mode: code
    turns:
      - say: "Looking first."
        actions:
          - bash: {command: "ls"}
      - say: "Thinking for a long while."
        delay_s: 120
      - say: "Done."
"""

# a builder's first turn that waits for the word `go` in its checkout, which a test says (say_go)
# only to the run it wants to go on
WAIT_FOR_GO = """      - say: "Waiting for the word."
        actions:
          - bash: {command: "until test -e go; do sleep 0.2; done; rm go"}
"""


def say_go(placed: dict[str, Any]) -> None:
    """The word `go`, into the checkout of the run whose `run.placed` event this is, on its node."""
    checkout = Path(placed["data"]["workdir"]) / "checkout"
    until((checkout / ".git").exists, "the run's checkout on its node never appeared", every=0.1)
    (checkout / "go").write_text("")
