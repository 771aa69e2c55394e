"""Where a dispatch runs: this machine (`local.py`) or a Ray cluster (`cluster.py`, `node.py`).

`base.py` is the seam the supervisor talks to: launch, observe (through the supervisor's Waker),
collect the verdict, cancel, adopt after a restart. Every executor leaves the same things behind
on the supervisor's side: a verdict file in the run's log folder and the work in the task's
worktree, so gates, reviews and merges never know where a run ran.
"""
