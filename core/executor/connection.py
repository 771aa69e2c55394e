"""The supervisor's one connection to the cluster's head (it is a Ray driver), and what it does when
that head is started again.

Without Ray's fault tolerance (an HA Redis behind the GCS), a head started again on its port is a
new cluster: every actor of the old one is gone, and a driver still joined to the old one is not
told. Its calls no longer end (a `ray.get` waits for ever) and it does not exit, so a supervisor
joined to it used to hang with every cluster run "running". The head's cluster id says which
cluster answers (core/records/ray_head.py asks it in Ray's own protocol): every wait of a run here
is cut into slices, and between them the id is compared with the one this process joined. Once it
differs, the run ends with one line saying so, and the supervisor starts itself again (the same
process, exec'd: loop.py), which joins the new cluster and finds the old cluster's runs gone.
Leaving the old cluster in the process is no way out: `ray.shutdown()` with the old head's raylet
gone ends the whole process at once, from Ray's own code ("the local Raylet is dead").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from pilothouse.providers.errors import UserError

_CONNECT = threading.Lock()
_JOINED: dict[str, bytes | None] = {}  # ray.address -> the id of the cluster this process joined there
_PROBED: dict[str, tuple[float, bytes | None]] = {}  # ray.address -> (when, the id its head gave)
PROBE_EVERY_S = 5.0  # the runs' waits share one ask of the head a while: one h2 call, not one a run
WAIT_SLICE_S = 5.0
DRIVER_WAITS_FOR_HEAD_S = 24 * 3600  # how long a run waits on the cluster before it looks whether the head changed


class HeadRestarted(RuntimeError):
    """The head at ray.address is a new cluster's: what this run had on the old one is gone."""


def connect(address: str, namespace: str) -> Any:
    """This process joins the cluster at `address` as a driver (once, and again after its head was
    started again); returns the ray module."""
    try:
        import ray
    except ImportError:
        raise UserError("executor: ray in .ai/project.yaml needs Ray here: pip install 'pilothouse[ray]'") from None
    with _CONNECT:
        if ray.is_initialized() and restarted(address):
            # joined to a cluster that is no more, which every call would wait on for ever: the
            # supervisor is starting again (the run that found it asked it to)
            raise HeadRestarted(rejoin_line(address))
        if not ray.is_initialized():
            _answers(address)
            # Ray ends a driver cut off from its head for this long (60 s by default), and the
            # supervisor with it: a head down a while, or being started again, must leave it waiting
            os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(DRIVER_WAITS_FOR_HEAD_S))
            # the workers' output stays on their nodes: it is theirs, and no log of ours should carry it
            ray.init(address=address, namespace=namespace, log_to_driver=False, logging_level=logging.ERROR)
            _JOINED[address] = _probe(address, fresh=True)
    return ray


def joined(address: str) -> bytes | None:
    """The id of the cluster this process joined at `address` (None: not known)."""
    return _JOINED.get(address)


def restarted(address: str, since: bytes | None = None) -> bool:
    """Whether the head at `address` is another cluster's than the one joined (`since`: the id a run
    started under; by default the one this process is joined to). A head that does not answer is
    not taken as restarted: it may be back on its port in a moment, as the same cluster."""
    was = since if since is not None else _JOINED.get(address)
    now = _probe(address)
    return was is not None and now is not None and now != was


def restart_line(address: str, run_id: str) -> str:
    return (f"the Ray head at {address} (ray.address) was started again, which makes a new cluster: run "
            f"{run_id}'s actor went with the old one, and each node must join the new head again "
            f"(docs/executors.md); the supervisor starts again to join it, and the run starts again there")


def rejoin_line(address: str) -> str:
    return f"the Ray head at {address} (ray.address) was started again: the supervisor starts again to join the new cluster"


def placed_on(record: dict[str, Any], address: str, run_id: str) -> str | None:
    """The line of a recorded run placed on another cluster than the one joined now (the head was
    started again since, while no supervisor or another process watched it), or None."""
    was, now = record.get("cluster_id"), joined(address)
    if was and now is not None and bytes.fromhex(str(was)) != now:
        return restart_line(address, run_id)
    return None


def get(ray: Any, ref: Any, address: str, since: bytes | None, run_id: str, limit: float | None = None) -> Any:
    """`ray.get(ref)` in slices, raising HeadRestarted between them once the head is a new cluster's
    and Ray's GetTimeoutError after `limit` seconds (None: no limit)."""
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        left = WAIT_SLICE_S if deadline is None else max(0.0, min(WAIT_SLICE_S, deadline - time.monotonic()))
        ready, _ = ray.wait([ref], timeout=left)
        if ready:
            return ray.get(ref)
        if restarted(address, since):
            raise HeadRestarted(restart_line(address, run_id))
        if deadline is not None and time.monotonic() >= deadline:
            raise ray.exceptions.GetTimeoutError(f"no answer from run {run_id}'s actor in {limit:g} s")


def _probe(address: str, fresh: bool = False) -> bytes | None:
    from pilothouse.core.records.ray_head import cluster_id

    now = time.monotonic()
    hit = _PROBED.get(address)
    if not fresh and hit is not None and now - hit[0] < PROBE_EVERY_S:
        return hit[1]
    found = cluster_id(address)
    _PROBED[address] = (now, found)
    return found


def _answers(address: str) -> None:
    from pilothouse.core.records.check import ray_head_unanswered

    unanswered = ray_head_unanswered(address)
    if unanswered:
        raise UserError(unanswered)
