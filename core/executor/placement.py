"""Where a cluster run goes (cluster.py asks): off the nodes that lost a run lately, a resume onto
the node that holds its sandbox, and what to say while no node takes a run.

A resumed builder continues its first run's session, whose sandbox (the runner's own files: its
session, its history) stays on the node that ran it (node.py keeps it). Placed anywhere else, the
node's dispatch refuses the resume for want of that sandbox, so a resume is pinned to that node;
when the node is gone it cannot be continued at all, and the run says so before anything is placed:
the task's builder then starts again, fresh, on a live node (the supervisor's retry after a run that
ended without a verdict).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.core.dispatch.runs import Launch
    from pilothouse.core.executor.host import Host

LOST_NODE_S = 120.0  # how long new runs keep off a node that lost a run's actor, while Ray counts it alive
PLACE_NOTICE_S = 10.0  # how long a run may wait for a node before it says why none took it
_FRESH = "the builder starts again, fresh, on a live node"


class SandboxGone(RuntimeError):
    """A resume whose first run's sandbox no live node holds: it is not placed at all."""


def _where(record: dict[str, Any]) -> str:
    node = str(record.get("node_id") or "")
    return f"the node {record.get('hostname') or '?'} ({node[:12]})"


def _alive(ray: Any) -> dict[str, dict[str, Any]]:
    return {str(n.get("NodeID")): n for n in ray.nodes() if n.get("Alive")}


class Placement:
    def __init__(self) -> None:
        # nodes where a run's actor was lost lately, by node id: when. Ray may still count such a
        # node alive for a while (its health checks take time), and placed a retry there, which was
        # lost at once: new runs keep off it until Ray says it is gone or LOST_NODE_S have passed
        self._lost_nodes: dict[str, float] = {}

    def node_lost(self, record: dict[str, Any], exc: Exception) -> str | None:
        """The run's actor died with its node (or its node's Ray): say which node, and keep new runs
        off it. None when the run was lost some other way."""
        import ray

        node = str(record.get("node_id") or "")
        if not node or not isinstance(exc, ray.exceptions.RayActorError):
            return None
        self._lost_nodes[node] = time.monotonic()
        where = f"{_where(record)} that ran it"
        return (f"{where} lost its actor; its retries keep off that node for {LOST_NODE_S:g}s or until Ray "
                f"says it is gone" if node in _alive(ray) else f"{where} died; its retries go to a live node")

    def _lately_lost(self) -> dict[str, float]:
        now = time.monotonic()
        for node, when in list(self._lost_nodes.items()):
            if now - when > LOST_NODE_S:
                del self._lost_nodes[node]
        return self._lost_nodes

    def keep_off(self, ray: Any) -> list[str]:
        """The lately lost nodes Ray still counts alive (those it knows are gone take no runs)."""
        lost = self._lately_lost()
        return [n for n in _alive(ray) if n in lost] if lost else []

    def sandbox_node(self, ray: Any, launch: Launch, first: dict[str, Any] | None) -> str:
        """The live node that holds the sandbox of the run `launch` resumes (`first`: that run's
        cluster record), or SandboxGone saying why there is none."""
        node = str((first or {}).get("node_id") or "")
        if not node:
            raise SandboxGone(f"run {launch.resume_of}, whose session this resume continues, was never placed on the "
                              f"cluster, so no node holds its sandbox: {_FRESH}")
        if node not in _alive(ray) or node in self._lately_lost():
            raise sandbox_gone(launch, first)
        return node

    def say_while_unplaced(self, sup: Host, launch: Launch, ray: Any, said_hello: Any,
                           resources: dict[str, float], kept_off: set[str], pinned: str | None = None) -> None:
        """A run no node takes sat "running" with no hint: after PLACE_NOTICE_S unplaced it says
        what it asks for and how many live nodes offer it, once (its placement is still awaited)."""
        ready, _ = ray.wait([said_hello], timeout=PLACE_NOTICE_S)
        if ready:
            return
        alive = list(_alive(ray).values())
        offering = [n for n in alive if all(float((n.get("Resources") or {}).get(k, 0)) >= v
                                            for k, v in resources.items())]
        asks = ", ".join(f"{k}: {v:g}" for k, v in resources.items())
        usable = [n for n in offering if n.get("NodeID") not in kept_off]
        if pinned is not None:
            reason = (f"not placed after {PLACE_NOTICE_S:g}s: it resumes run {launch.resume_of}, whose sandbox is on "
                      f"node {pinned[:12]} alone, and that node's {asks or 'places'} are taken by other runs; it "
                      f"starts there when one is free")
        elif offering and not usable:
            reason = (f"not placed after {PLACE_NOTICE_S:g}s: the only live node(s) offering {asks or 'a place'} lost "
                      f"a run lately and are kept off for up to {LOST_NODE_S:g}s, until Ray says they are gone; "
                      f"start another node with --resources (docs/executors.md)")
        elif not offering:
            reason = (f"not placed after {PLACE_NOTICE_S:g}s: it asks for {asks or 'no resource'}, which none of the "
                      f"{len(alive)} live node(s) offer; start a node with --resources (docs/executors.md) or "
                      f"change ray.resources in .ai/project.yaml")
        else:
            reason = (f"not placed after {PLACE_NOTICE_S:g}s: the {len(offering)} live node(s) offering "
                      f"{asks or 'a place'} are taken by other runs; it starts when one is free")
        sup.log.warning("cluster run %s %s", launch.run_id, reason)
        data: dict[str, Any] = {"reason": reason, "resources": resources, "nodes_alive": len(alive),
                                "nodes_offering": len(offering)}
        if pinned is not None:
            data["pinned_to"] = pinned
        sup.events.append("run.unplaced", job=launch.job, task=launch.task, run=launch.run_id, data=data)


def sandbox_gone(launch: Launch, first: dict[str, Any] | None) -> SandboxGone:
    """The node the resume was pinned to is gone (or Ray refused to place it there, which it does
    only for a node it no longer has)."""
    return SandboxGone(f"{_where(first or {})}, which holds the sandbox of run {launch.resume_of} whose session this "
                       f"resume continues, is gone: {_FRESH}")
