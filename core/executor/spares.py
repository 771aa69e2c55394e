"""Run actors made ahead of the runs that take them.

Making a run's actor on a node (a worker process started there, its imports, its place) took about a
second, on every run's way from launch to work. The executor keeps `ray.spares` actors placed and warm
beside the runs; a new run claims one (a few ms: it names the run, then the actor is that run's
alone) and another is made for the next. A spare is claimed only when it has answered (it is placed
and constructed), asks for the resources the run asks for, belongs to the cluster joined now, and
stands on no node the run keeps off; otherwise the run makes its own actor as before.

A spare holds what it asks of its node (`ray.resources`) as a run does, so it must never keep a
run from a place: a run that makes its own actor (none was ready, or it must go to one node) first
kills the spares not claimed, and none is made again until no run waits to be placed.

Spares are detached, named `spare-…`, like the runs' actors: the run record of a run that claimed
one names it (`actor`), which is how a supervisor started again finds that run. The unclaimed ones
are killed when the supervisor stops; a supervisor that died leaves them, so the next one's first
connection kills every `spare-…` actor of the repository's namespace that no run record names, and
a spare no run claimed in SPARE_TTL_S ends itself (node.py), so none holds a node for good.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

SPARE_PREFIX = "spare-"
SPARE_TTL_S = 600.0  # an unclaimed spare ends itself then
_TAKE_WITHIN_S = SPARE_TTL_S - 60  # an older one is not taken: it may end while the run claims it


@dataclass
class Spare:
    name: str
    actor: Any
    hello: Any  # the ref of its first answer: ready once it is placed and constructed
    wants: str  # the resources it asked for (json)
    since: bytes | None  # the cluster it was made on (connection.joined)
    made: float  # time.monotonic() when it was asked for


def actor_options(namespace: str, name: str, resources: dict[str, float], **where: Any) -> dict[str, Any]:
    """How every run actor is made: detached (it outlives the supervisor), by name, taking no CPU of
    its node's (the dispatch under it is what works), never restarted by Ray (a run starts once)."""
    return dict(name=name, namespace=namespace, lifetime="detached", get_if_exists=True, num_cpus=0,
                max_concurrency=4, max_restarts=0, resources=resources, **where)


class Spares:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._lock = threading.Lock()
        self._spares: list[Spare] = []
        self._swept = False
        self._unplaced = 0  # runs waiting for a place of their own actor's: no spare may take it first

    def fill(self, ray: Any, resources: dict[str, float], since: bytes | None, in_use: Any, count: int) -> None:
        """Make spares until `count` are on their way for these resources on this cluster; a
        supervisor's first fill kills the spares of earlier supervisors no run record names."""
        from pilothouse.core.executor.node import RunActor

        wants = _wants(resources)
        self.sweep(ray, in_use)
        with self._lock:
            if self._unplaced:
                return
            stale = [s for s in self._spares if s.wants != wants or s.since != since or _old(s)]
            self._spares = [s for s in self._spares if s not in stale]
            while len(self._spares) < count:
                name = f"{SPARE_PREFIX}{uuid.uuid4().hex[:16]}"
                actor = ray.remote(RunActor).options(**actor_options(self.namespace, name, dict(resources))).remote(
                    self.namespace, None, SPARE_TTL_S)
                self._spares.append(Spare(name, actor, actor.hello.remote(), wants, since, time.monotonic()))
        for s in stale:
            _kill(ray, s.actor)

    def sweep(self, ray: Any, in_use: Any) -> None:
        """Once a supervisor: kill the spares of earlier ones that no run record (`in_use()`) names."""
        with self._lock:
            if self._swept:
                return
            self._swept = True
        _sweep(ray, self.namespace, in_use())

    def take(self, ray: Any, resources: dict[str, float], since: bytes | None, avoid: set[str],
             wait: float) -> Spare | None:
        """A spare for these resources on this cluster, on none of the `avoid` nodes: the first of
        them to have answered, waited for up to `wait` seconds (an actor made now would be no
        sooner); None when there is none. What cannot be claimed is killed."""
        wants = _wants(resources)
        with self._lock:
            mine = [s for s in self._spares if s.wants == wants and s.since == since and not _old(s)]
            # this run's to wait for: another run that looks meanwhile makes its own actor
            self._spares = [s for s in self._spares if s not in mine]
        while mine:
            ready, _ = ray.wait([s.hello for s in mine], num_returns=1, timeout=wait)
            if not ready:
                break
            spare = next(s for s in mine if s.hello == ready[0])
            mine.remove(spare)
            try:
                node = str(ray.get(spare.hello)["node_id"])
            except Exception:  # noqa: BLE001 - its node died, or its making failed
                node = None
            if node is not None and node not in avoid:
                with self._lock:
                    self._spares += mine
                return spare
            _kill(ray, spare.actor)
        with self._lock:
            self._spares += mine  # none answered in time: the run makes its own, which kills these
        return None

    def making_own(self, ray: Any) -> None:
        """A run makes its own actor: the unclaimed spares go, so that none holds the place it
        needs, and none is made until `placed` (every run waiting so has its place)."""
        with self._lock:
            self._unplaced += 1
        self.close(ray)

    def placed(self) -> None:
        with self._lock:
            self._unplaced = max(0, self._unplaced - 1)

    def close(self, ray: Any) -> None:
        """Kill the unclaimed spares (the supervisor stops)."""
        with self._lock:
            spares, self._spares = self._spares, []
        for s in spares:
            _kill(ray, s.actor)


def _old(spare: Spare) -> bool:
    return time.monotonic() - spare.made > _TAKE_WITHIN_S


def _wants(resources: dict[str, float]) -> str:
    return json.dumps(dict(resources), sort_keys=True)


def _kill(ray: Any, actor: Any) -> None:
    try:
        ray.kill(actor)
    except Exception:  # noqa: BLE001 - gone already
        pass


def _sweep(ray: Any, namespace: str, in_use: set[str]) -> None:
    """Kill the namespace's spares that no run record names (a supervisor that died left them)."""
    from ray.util import list_named_actors

    for name in list_named_actors():
        if isinstance(name, str) and name.startswith(SPARE_PREFIX) and name not in in_use:
            try:
                _kill(ray, ray.get_actor(name, namespace=namespace))
            except ValueError:
                pass  # gone meanwhile
