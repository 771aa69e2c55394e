"""Integration: each job's approved task branches merge into that job's own integration line
(`<integration_branch>/<job>`, e.g. pilothouse/integration/fix-login) in a checkout of its own.

One line per job is what makes `ship` safe: a job's line holds the base branch (as of the job's
start or its last sync) plus that job's merges and nothing else, so what its reviewer and its full
gate saw is exactly what shipping it lands; another job's unaccepted work is never on it, and a
job's tasks never start on it. Each line has its own checkout, lock and pending marker, so two
jobs merge side by side. The checkouts live outside the repository (next to the task
worktrees), so the operator's checkout, its branch and its uncommitted edits are never touched. Each merge is `--no-ff`
(one merge commit per task), followed by the combined gate; a conflict or a failing gate is
rolled back to the previous head. Merging is idempotent: a branch whose tip already has its
merge commit is reported as merged, and a merge interrupted mid-gate (supervisor killed) is
rolled back and redone, so a restarted supervisor never merges a commit twice nor keeps an
ungated merge.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilothouse.core.git.checkout import checkout_state
from pilothouse.core.git.gates import DEFAULT_TIMEOUT_S, GateResult, kill_orphan_gate, run_gate
from pilothouse.core.git.leaks import SecretInDiff, check_branch
from pilothouse.core.git.worktrees import (
    INTEGRATION_DIR,
    GitError,
    branch_exists,
    checkout_of,
    dirty_paths,
    git,
    git_ok,
    git_run,
    some_paths,
    worktree_root,
)
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import PROTECTED_BRANCHES, ProjectConfig
from pilothouse.providers.errors import UserError
from pilothouse.providers.fsutil import atomic_write_json


@dataclass
class MergeResult:
    ok: bool
    merged_sha: str | None
    previous_sha: str | None
    reason: str | None = None
    gate: GateResult | None = None
    already_merged: bool = False
    conflicts: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "merged_sha": self.merged_sha, "previous_sha": self.previous_sha,
                "reason": self.reason, "already_merged": self.already_merged, "conflicts": self.conflicts,
                "gate": self.gate.to_dict() if self.gate else None}


def job_line(project: ProjectConfig, job: str) -> str:
    """The job's integration line: its merges, on the base branch as of its start (or last sync)."""
    return f"{project.integration_branch}/{job}"


def integration_path(layout: RepoLayout, job: str) -> Path:
    return worktree_root(layout) / INTEGRATION_DIR / job


def _refuse_protected(branch: str) -> None:
    if branch in PROTECTED_BRANCHES:
        raise UserError(f".ai/project.yaml: integration_branch: '{branch}' is protected; pilothouse merges "
                        "only into its own branch: set integration_branch: pilothouse/integration")


def base_branch(layout: RepoLayout, project: ProjectConfig, *, required: bool = True) -> str:
    """The branch jobs start from and work ships to: `base_branch` of project.yaml, else the branch
    checked out in the operator's checkout. Without either, UserError — or "" when not `required`
    (a detached checkout: new integration branches start from its HEAD and there is nothing to sync)."""
    if project.base_branch is not None:
        if not branch_exists(layout.root, project.base_branch):
            raise UserError(f".ai/project.yaml: base_branch: there is no branch {project.base_branch!r} in "
                            f"{layout.root}: name an existing branch (git branch --list) or set it to null")
        return project.base_branch
    name = git(layout.root, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    ours = bool(name) and (name == project.integration_branch or name.startswith(project.integration_branch + "/"))
    if not required and (not name or ours):
        return ""
    if not name:
        raise UserError(f"{layout.root} is on a detached HEAD, so there is no base branch to start jobs from: "
                        "check out your branch, or set base_branch in .ai/project.yaml")
    if ours:
        raise UserError(f"{layout.root} has the integration branch {name} checked out: check out your own branch "
                        "(e.g. main), or set base_branch in .ai/project.yaml")
    return name


def ensure_integration_checkout(layout: RepoLayout, project: ProjectConfig, job: str) -> Path:
    """The job's line's dedicated checkout, created on first use from the base branch's head."""
    _refuse_protected(project.integration_branch)
    branch = job_line(project, job)
    path = integration_path(layout, job)
    if not branch_exists(layout.root, branch):
        if branch_exists(layout.root, project.integration_branch):
            # git keeps branches as files: X cannot be a branch and a folder of branches at once
            raise UserError(f"the branch {project.integration_branch} (one integration branch shared by every job, "
                            f"from an earlier pilothouse) is in the way of the job lines {branch}: ship what it "
                            f"holds, then rename it (git branch -m {project.integration_branch} "
                            f"{project.integration_branch}-old) and retry")
        try:
            base = base_branch(layout, project, required=False)
            git(layout.root, "branch", branch, f"refs/heads/{base}" if base else "HEAD")
        except GitError as exc:
            raise UserError(f"cannot create the integration branch {branch}: {exc.stderr}") from None
    where = checkout_of(layout, branch)
    if where is None:
        git(layout.root, "worktree", "prune", check=False)
        if path.exists() and any(path.iterdir()):
            raise UserError(f"{path} exists but is not the checkout of {branch}: remove it "
                            "(pilothouse maintain worktrees remove PATH) and retry")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            git(layout.root, "worktree", "add", "-q", str(path), branch)
        except GitError as exc:
            raise UserError(f"cannot check out {branch} at {path}: {exc.stderr}") from None
        where = path
    elif where.resolve() != path.resolve():
        raise UserError(f"the integration branch {branch} is checked out at {where}: switch that checkout to "
                        f"another branch (pilothouse merges in its own checkout)")
    dirty = dirty_paths(where)
    if dirty:
        raise UserError(f"the integration checkout {where} has uncommitted changes ({some_paths(dirty)}): commit or "
                        f"discard them there (git -C {where} status)")
    return where


def _integration_state(layout: RepoLayout, project: ProjectConfig, job: str) -> tuple[Path, str]:
    """(the job's integration checkout, its HEAD), checked like ensure_integration_checkout: in one
    git call when the checkout is there, on the line and clean (every merge after the first)."""
    path = integration_path(layout, job)
    if (path / ".git").exists():
        _refuse_protected(project.integration_branch)
        state = checkout_state(path)
        if state is not None and state[1] == job_line(project, job) and not state[2]:
            return path, state[0]
    checkout = ensure_integration_checkout(layout, project, job)
    return checkout, git(checkout, "rev-parse", "HEAD")


def _lock_path(layout: RepoLayout, job: str) -> Path:
    return worktree_root(layout) / f"integration-{job}.lock"


@contextmanager
def _merge_lock(layout: RepoLayout, job: str, *, wait: bool = True) -> Iterator[None]:
    """The job's line, one git at a time. Without `wait`, UserError when someone holds it (ship
    never waits behind the job's own merges: it refuses while they are in flight)."""
    lock_path = _lock_path(layout, job)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise UserError(f"job {job} is merging or gating on its integration line right now: wait for it "
                            f"(pilothouse job wait {job}), then retry") from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextmanager
def job_line_idle(layout: RepoLayout, job: str) -> Iterator[None]:
    """Hold the job's line for something that must not race its merges (ship); UserError, at once,
    while a merge or gate of the job is in flight or its pending marker says one was cut short."""
    with _merge_lock(layout, job, wait=False):
        if pending_file(layout, job).exists():
            raise UserError(f"job {job} has a merge whose gate never finished ({pending_file(layout, job)}): start "
                            "the supervisor (pilothouse supervise) so it is rolled back and redone, then retry")
        yield


def pending_file(layout: RepoLayout, job: str) -> Path:
    return worktree_root(layout) / f"integration-{job}.pending.json"


def _find_merge(checkout: Path, tip: str) -> tuple[str, str] | None:
    """(merge commit, its first parent) of the first-parent merge on the integration head whose
    second parent is `tip`."""
    out = git(checkout, "log", "--first-parent", "--merges", "--format=%H %P", "HEAD")
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and tip in parts[2:]:
            return parts[0], parts[1]
    return None


def _recover_pending(layout: RepoLayout, job: str, checkout: Path) -> None:
    """A merge whose gate never finished (killed supervisor) is undone so it can be redone."""
    pending = pending_file(layout, job)
    try:
        info = json.loads(pending.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        pending.unlink(missing_ok=True)
        return
    if isinstance(info.get("gate_pgid"), int):
        kill_orphan_gate(info["gate_pgid"], checkout)
    previous = info.get("previous_sha")
    if previous and git_ok(checkout, "merge-base", "--is-ancestor", previous, "HEAD"):
        git(checkout, "merge", "--abort", check=False)
        git(checkout, "reset", "-q", "--hard", previous)
    pending.unlink(missing_ok=True)


def _rollback(checkout: Path, previous: str) -> None:
    git(checkout, "merge", "--abort", check=False)
    git(checkout, "reset", "-q", "--hard", previous)
    git(checkout, "clean", "-q", "-fd", check=False)


def _already_merged(checkout: Path, branch: str, previous: str, line: str) -> MergeResult:
    """`git merge` found nothing to do: the branch is merged already, or never left the head."""
    tip = git(checkout, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}")
    found = _find_merge(checkout, tip)
    if found is None:
        return MergeResult(False, None, previous,
                           reason=f"nothing to merge: {branch} has no commits beyond {line}")
    return MergeResult(True, found[0], found[1], reason="already merged", already_merged=True)


def _merge_failed(checkout: Path, branch: str, previous: str, proc: Any) -> MergeResult:
    conflicts = [p for p in git(checkout, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
    _rollback(checkout, previous)
    if not conflicts and not git_ok(checkout, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}"):
        return MergeResult(False, None, None, reason=f"branch {branch} does not exist")
    detail = (proc.stderr or proc.stdout).strip().splitlines()
    what = (f"merge conflict in {', '.join(conflicts[:5])}" if conflicts
            else f"merge failed: {detail[-1] if detail else 'git merge exited ' + str(proc.returncode)}")
    return MergeResult(False, None, previous, reason=f"{what}; rolled back to {previous[:10]}",
                       conflicts=conflicts)


def merge_task(layout: RepoLayout, project: ProjectConfig, job: str, branch: str, message: str,
               gate_level: str | None = "full", *, timeout: float = DEFAULT_TIMEOUT_S,
               env: dict[str, str] | None = None) -> MergeResult:
    """Merge `branch` into the integration branch and gate it; roll back on conflict or failure
    (a train of one: merge_train)."""
    [res] = merge_train(layout, project, job, [(branch, message)], gate_level, timeout=timeout, env=env)
    if isinstance(res, SecretInDiff):
        raise res
    return res


def merge_train(layout: RepoLayout, project: ProjectConfig, job: str, cars: list[tuple[str, str]],
                gate_level: str | None = "full", *, timeout: float = DEFAULT_TIMEOUT_S,
                env: dict[str, str] | None = None) -> list[MergeResult | SecretInDiff]:
    """Merge the job's approved (branch, message) pairs onto its line as one batch with one gate, in their order; one
    result per pair. When the gate fails, the batch is rolled back and bisected: each half is merged
    and gated again on its own, down to the branch that breaks it, so the others still merge. A
    branch that conflicts, or that carries a credential, is left out and the rest go on.

    The full gate after each merge was what a big job waited for: with twenty workers finishing,
    the last approved branch waited for nineteen merges and gates ahead of it.

    Git calls for each branch on the usual path: the credential scan, the merge, one log for the new
    head — plus one gate (with its two tree snapshots) for the whole batch. (The scan is two: the
    branch's diff and its commits' messages.)"""
    with _merge_lock(layout, job):
        checkout = integration_path(layout, job)
        if checkout.exists():
            _recover_pending(layout, job, checkout)
        checkout, head = _integration_state(layout, project, job)
        train = _Train(layout, project, job, checkout, head, cars, gate_level, timeout, env)
        todo = []
        for i, (branch, _message) in enumerate(cars):
            try:
                # before git moves: a branch that carries a credential never reaches the integration branch
                check_branch(checkout, head, branch)
                todo.append(i)
            except SecretInDiff as exc:
                train.results[i] = exc
        try:
            train.land(todo)
        except BaseException:
            # interrupted in-process: never leave an ungated merge behind
            _rollback(checkout, train.head)
            pending_file(layout, job).unlink(missing_ok=True)
            raise
        return [r if r is not None else MergeResult(False, None, head, reason="not merged") for r in train.results]


class _Train:
    """One batch under the merge lock; `head` is the last gated head of the integration branch."""

    def __init__(self, layout: RepoLayout, project: ProjectConfig, job: str, checkout: Path, head: str,
                 cars: list[tuple[str, str]], gate_level: str | None, timeout: float,
                 env: dict[str, str] | None) -> None:
        self.layout, self.project, self.job, self.checkout, self.head = layout, project, job, checkout, head
        self.cars, self.gate_level, self.timeout, self.env = cars, gate_level, timeout, env
        self.results: list[MergeResult | SecretInDiff | None] = [None] * len(cars)

    def land(self, group: list[int], failing: bool = False) -> None:
        """Merge the `group` (indices into cars) on `head`, gate once; on failure, bisect. `failing`:
        the group is known to fail on `head` (its left neighbour passed alone), so it is split at once."""
        if failing and len(group) > 1:
            self._bisect(group)
            return
        base, pending = self.head, pending_file(self.layout, self.job)
        branches = [self.cars[i][0] for i in group]
        # the intent is recorded before git moves: a killed supervisor's successor resets to `base`
        atomic_write_json(pending, {"branches": branches, "previous_sha": base})
        merged: list[tuple[int, str, str]] = []  # (car, its merge commit, the head it was merged on)
        current = base
        for i in group:
            res = self._merge(i, current)
            if isinstance(res, MergeResult):
                self.results[i] = res
                continue
            merged.append((i, res, current))
            current = res
        gate = None
        if merged and self.gate_level is not None:
            def remember(pgid: int) -> None:
                atomic_write_json(pending, {"branches": branches, "previous_sha": base, "gate_pgid": pgid})

            gate = run_gate(self.project, self.gate_level, self.checkout, timeout=self.timeout, env=self.env,
                            on_start=remember)
        if gate is None or gate.passed:
            for i, sha, on in merged:
                self.results[i] = MergeResult(True, sha, on, gate=gate)
            self.head = current
            pending.unlink(missing_ok=True)
            return
        _rollback(self.checkout, base)
        pending.unlink(missing_ok=True)
        if len(merged) == 1:
            i = merged[0][0]
            self.results[i] = MergeResult(False, None, base, gate=gate, reason=f"{gate.reason} after merging "
                                          f"{self.cars[i][0]}; rolled back to {base[:10]}")
            return
        self._bisect([i for i, _, _ in merged])

    def _bisect(self, group: list[int]) -> None:
        left, right = group[:len(group) // 2], group[len(group) // 2:]
        before = self.head
        self.land(left)
        # the left half landed whole: what failed the group is in the right half
        self.land(right, failing=self.head != before and all(self._ok(i) for i in left))

    def _ok(self, i: int) -> bool:
        res = self.results[i]
        return isinstance(res, MergeResult) and res.ok

    def _merge(self, i: int, previous: str) -> MergeResult | str:
        """Merge car `i` on `previous`: its merge commit, or the result when there is nothing to gate."""
        branch, message = self.cars[i]
        # an already-merged tip is "Already up to date" (exit 0, no commit): idempotence costs no
        # extra call on the usual path; hooks are the operator's, not for this checkout
        proc = git_run(self.checkout, "-c", "core.hooksPath=/dev/null", "merge", "--no-ff", "--no-edit",
                       "-m", message, branch)
        if proc.returncode != 0:
            return _merge_failed(self.checkout, branch, previous, proc)  # rolled back to `previous`
        merged = git(self.checkout, "log", "-1", "--format=%H", "HEAD")
        if merged == previous:
            return _already_merged(self.checkout, branch, previous, job_line(self.project, self.job))
        return merged


def integration_head(layout: RepoLayout, project: ProjectConfig, job: str) -> str | None:
    try:
        return git(layout.root, "rev-parse", "--verify", "-q", f"refs/heads/{job_line(project, job)}")
    except GitError:
        return None


def run_integration_gate(layout: RepoLayout, project: ProjectConfig, job: str, level: str = "full", *,
                         timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None,
                         log_to: Path | None = None) -> GateResult:
    """The combined gate on the job's line (before accepting the job); `log_to`: where its whole
    output is kept."""
    with _merge_lock(layout, job):
        checkout, _head = _integration_state(layout, project, job)
        return run_gate(project, level, checkout, timeout=timeout, env=env, log_to=log_to)


def sync_integration(layout: RepoLayout, project: ProjectConfig, job: str, ref: str | None = None) -> dict[str, Any]:
    """Bring the job's line up to the base branch's head (`ref`: another commit), so the job builds
    on what the operator committed (and the jobs shipped) since: a fast-forward when it can, else a
    merge commit in the job's checkout. A conflict is rolled back and reported (`state: conflict`,
    the files) for the caller to say; nothing is ever rewritten.
    """
    name = ref or base_branch(layout, project, required=False)
    if not name:
        return {"state": "up-to-date", "head": integration_head(layout, project, job), "reason": "no base branch"}
    base = ref or f"refs/heads/{name}"
    with _merge_lock(layout, job):
        checkout, head = _integration_state(layout, project, job)
        target = git(layout.root, "rev-parse", "--verify", f"{base}^{{commit}}")
        if head == target or git_ok(checkout, "merge-base", "--is-ancestor", target, head):
            return {"state": "up-to-date", "head": head}
        if git_ok(checkout, "merge-base", "--is-ancestor", head, target):
            git(checkout, "merge", "-q", "--ff-only", target)
            return {"state": "fast-forwarded", "head": target, "previous": head}
        proc = git_run(checkout, "-c", "core.hooksPath=/dev/null", "merge", "--no-ff", "--no-edit",
                       "-m", f"Bring {name} into {job_line(project, job)}", target)
        if proc.returncode != 0:
            conflicts = [p for p in git(checkout, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
            _rollback(checkout, head)
            return {"state": "conflict", "head": head, "base": target, "conflicts": conflicts}
        return {"state": "merged", "head": git(checkout, "rev-parse", "HEAD"), "previous": head, "base": target}
