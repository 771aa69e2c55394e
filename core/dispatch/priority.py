"""Workers' CPU priority: below the supervisor's, so its gates and merges are not starved.

Every dependent task waits for its dependencies' commit, gate and merge; with several workers
busy on a small machine those few milliseconds of supervisor work queue behind the workers' CPU
use. Workers get `worker_nice` (project.yaml); the supervisor and its gates keep their own.

Two knobs, because of how Linux shares the CPU: a process nice (inherited by everything the
worker starts) orders processes within a scheduling group, and on kernels with autogroups
(`kernel.sched_autogroup_enabled`, the default on most distributions) every session is a group of
its own — the CPU is shared between sessions first — so each session a worker starts needs the
group's nice as well. Both only ever lower the priority; both are best effort (a missing /proc
file or a refused write leaves the worker at normal priority, which is only slower for others).
"""

from __future__ import annotations

import errno
import os
import threading

# an unprivileged process may change an autogroup's nice once per 100 ms, system wide
_RETRY_S = 0.11
_RETRIES = 3


def lower(pid: int, nice: int) -> None:
    """Give the just-spawned process `pid`, which leads a session of its own, the nice `nice`."""
    if nice <= 0:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError:
        return  # gone already, or not ours
    set_session(pid, nice)


def set_session(pid: int, nice: int, attempt: int = 0) -> None:
    """The autogroup nice of the session `pid` leads (retried off-thread when rate limited)."""
    if nice <= 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as fh:
            fh.write(str(nice))
    except OSError as exc:
        if exc.errno == errno.EAGAIN and attempt < _RETRIES:
            timer = threading.Timer(_RETRY_S, set_session, (pid, nice, attempt + 1))
            timer.daemon = True
            timer.start()


def own_nice() -> int:
    """This process's nice value (what a worker passes on to the sessions it starts)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return 0
