"""The replies an operator can give a problem, and which fit which kind of stop.

Stdlib-only and tiny: the CLI's argument parser reads it on every command.
"""

from __future__ import annotations

REPLIES = ("retry", "accept", "skip", "dismiss", "hint", "plan")
NEEDS_WORDS = ("hint", "plan")

# What each reply does, in the operator's terms (shown by `problem list` and the cockpit).
REPLY_HELP = {
    "retry": "run the stopped step again (after you fixed the cause)",
    "accept": "take the builder's reviewed commit as it is; its checks must still pass",
    "skip": "cancel the task and every task that depends on it",
    "dismiss": "close the request for more files; the task keeps its scope",
    "hint": "the same builder continues its own session with your words",
    "plan": "the assigner re-plans the job with your words",
}

# A stop of the whole job (its final gate, the combined review) has no task to skip or hint.
JOB_REPLIES = ("retry", "accept", "plan")

# Which replies can fix which kind of stop. The first is the cheapest sensible answer.
KIND_REPLIES: dict[str, tuple[str, ...]] = {
    "gate_failed": ("retry", "skip", "hint", "plan"),
    "review_rejected": ("hint", "accept", "skip", "plan"),
    # the gate passed on weakened tests: the builder restores them (hint), the operator does in the
    # worktree and retries (the fix is committed and gated; a retry with nothing changed is refused:
    # it would only measure the same commit again), or takes the change as it is (accept, recorded)
    "gate_weakened": ("hint", "retry", "accept", "skip", "plan"),
    # retry after a hand fix in the worktree gates the fix, like every other task stop; with nothing
    # changed, a fresh builder starts
    "unchanged_resubmission": ("hint", "retry", "accept", "skip", "plan"),
    "reviewer_failed": ("retry", "accept", "skip"),
    "builder_blocked": ("retry", "hint", "skip", "plan", "dismiss"),
    "needs_files": ("dismiss", "hint", "skip", "plan"),
    "worker_crashed": ("retry", "hint", "skip", "plan"),
    # the operator stopped the worker (`x`, `pilothouse task abort`): no crash, nothing to diagnose
    "operator_aborted": ("retry", "hint", "skip", "plan"),
    "no_changes": ("hint", "retry", "skip", "plan"),
    "setup_failed": ("retry", "skip"),
    # no model the policy allows has what the role needs: change model_policy (or probe again), retry
    "model_unfit": ("retry", "skip"),
    "worktree_failed": ("retry", "skip"),
    "merge_conflict": ("retry", "hint", "skip", "plan"),
    "merge_failed": ("retry", "hint", "skip", "plan"),
    "plan_invalid": ("retry", "plan"),
    # the builder's work (or a branch to merge) carries a credential: the builder takes it out
    # (hint), the operator does and retries, or the task goes; never accept: that commits it
    "secret_found": ("hint", "retry", "skip", "plan"),
    # the builder moved .ai (pilothouse's records and settings): the operator puts it back and
    # retries (the commit is tried again), or the task goes
    "scope_violation": ("retry", "skip", "plan"),
    "auth": ("retry",),
    "budget": ("retry",),
    "cannot_proceed": ("retry",),
}
