"""Integration: approved task branches merge into the integration branch in a dedicated checkout.

The checkout lives outside the repository (next to the task worktrees), so the operator's
checkout, its branch and its uncommitted edits are never touched. Each merge is `--no-ff`
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

from pilothouse.core.git.gates import DEFAULT_TIMEOUT_S, GateResult, kill_orphan_gate, run_gate
from pilothouse.core.git.leaks import SecretInDiff, check_branch
from pilothouse.core.git.worktrees import (
    INTEGRATION_DIR,
    GitError,
    branch_exists,
    checkout_of,
    checkout_state,
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


def integration_path(layout: RepoLayout) -> Path:
    return worktree_root(layout) / INTEGRATION_DIR


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
    if not required and (not name or name == project.integration_branch):
        return ""
    if not name:
        raise UserError(f"{layout.root} is on a detached HEAD, so there is no base branch to start jobs from: "
                        "check out your branch, or set base_branch in .ai/project.yaml")
    if name == project.integration_branch:
        raise UserError(f"{layout.root} has the integration branch {name} checked out: check out your own branch "
                        "(e.g. main), or set base_branch in .ai/project.yaml")
    return name


def ensure_integration_checkout(layout: RepoLayout, project: ProjectConfig) -> Path:
    """The integration branch's dedicated checkout, created on first use from the base branch."""
    branch = project.integration_branch
    _refuse_protected(branch)
    path = integration_path(layout)
    if not branch_exists(layout.root, branch):
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


def _integration_state(layout: RepoLayout, project: ProjectConfig) -> tuple[Path, str]:
    """(the integration checkout, its HEAD), checked like ensure_integration_checkout: in one git
    call when the checkout is there, on the branch and clean (every merge after the first)."""
    path = integration_path(layout)
    if (path / ".git").exists():
        _refuse_protected(project.integration_branch)
        state = checkout_state(path)
        if state is not None and state[1] == project.integration_branch and not state[2]:
            return path, state[0]
    checkout = ensure_integration_checkout(layout, project)
    return checkout, git(checkout, "rev-parse", "HEAD")


@contextmanager
def _merge_lock(layout: RepoLayout) -> Iterator[None]:
    lock_path = worktree_root(layout) / "integration.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _pending_file(layout: RepoLayout) -> Path:
    return worktree_root(layout) / "integration.pending.json"


def _find_merge(checkout: Path, tip: str) -> tuple[str, str] | None:
    """(merge commit, its first parent) of the first-parent merge on the integration head whose
    second parent is `tip`."""
    out = git(checkout, "log", "--first-parent", "--merges", "--format=%H %P", "HEAD")
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and tip in parts[2:]:
            return parts[0], parts[1]
    return None


def _recover_pending(layout: RepoLayout, checkout: Path) -> None:
    """A merge whose gate never finished (killed supervisor) is undone so it can be redone."""
    pending = _pending_file(layout)
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


def _already_merged(checkout: Path, branch: str, previous: str, project: ProjectConfig) -> MergeResult:
    """`git merge` found nothing to do: the branch is merged already, or never left the head."""
    tip = git(checkout, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}")
    found = _find_merge(checkout, tip)
    if found is None:
        return MergeResult(False, None, previous,
                           reason=f"nothing to merge: {branch} has no commits beyond {project.integration_branch}")
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


def merge_task(layout: RepoLayout, project: ProjectConfig, branch: str, message: str,
               gate_level: str | None = "full", *, timeout: float = DEFAULT_TIMEOUT_S,
               env: dict[str, str] | None = None) -> MergeResult:
    """Merge `branch` into the integration branch and gate it; roll back on conflict or failure
    (a train of one: merge_train)."""
    [res] = merge_train(layout, project, [(branch, message)], gate_level, timeout=timeout, env=env)
    if isinstance(res, SecretInDiff):
        raise res
    return res


def merge_train(layout: RepoLayout, project: ProjectConfig, cars: list[tuple[str, str]],
                gate_level: str | None = "full", *, timeout: float = DEFAULT_TIMEOUT_S,
                env: dict[str, str] | None = None) -> list[MergeResult | SecretInDiff]:
    """Merge the approved (branch, message) pairs as one batch with one gate, in their order; one
    result per pair. When the gate fails, the batch is rolled back and bisected: each half is merged
    and gated again on its own, down to the branch that breaks it, so the others still merge. A
    branch that conflicts, or that carries a credential, is left out and the rest go on.

    The full gate after each merge was what a big job waited for: with twenty workers finishing,
    the last approved branch waited for nineteen merges and gates ahead of it.

    Git calls for each branch on the usual path: the credential scan, the merge, one log for the new
    head — plus one gate (with its two tree snapshots) for the whole batch. (The scan is two: the
    branch's diff and its commits' messages.)"""
    with _merge_lock(layout):
        checkout = integration_path(layout)
        if checkout.exists():
            _recover_pending(layout, checkout)
        checkout, head = _integration_state(layout, project)
        train = _Train(layout, project, checkout, head, cars, gate_level, timeout, env)
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
            _pending_file(layout).unlink(missing_ok=True)
            raise
        return [r if r is not None else MergeResult(False, None, head, reason="not merged") for r in train.results]


class _Train:
    """One batch under the merge lock; `head` is the last gated head of the integration branch."""

    def __init__(self, layout: RepoLayout, project: ProjectConfig, checkout: Path, head: str,
                 cars: list[tuple[str, str]], gate_level: str | None, timeout: float,
                 env: dict[str, str] | None) -> None:
        self.layout, self.project, self.checkout, self.head = layout, project, checkout, head
        self.cars, self.gate_level, self.timeout, self.env = cars, gate_level, timeout, env
        self.results: list[MergeResult | SecretInDiff | None] = [None] * len(cars)

    def land(self, group: list[int], failing: bool = False) -> None:
        """Merge the `group` (indices into cars) on `head`, gate once; on failure, bisect. `failing`:
        the group is known to fail on `head` (its left neighbour passed alone), so it is split at once."""
        if failing and len(group) > 1:
            self._bisect(group)
            return
        base, pending = self.head, _pending_file(self.layout)
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
            return _already_merged(self.checkout, branch, previous, self.project)
        return merged


def integration_head(layout: RepoLayout, project: ProjectConfig) -> str | None:
    try:
        return git(layout.root, "rev-parse", "--verify", "-q", f"refs/heads/{project.integration_branch}")
    except GitError:
        return None


def run_integration_gate(layout: RepoLayout, project: ProjectConfig, level: str = "full", *,
                         timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None,
                         log_to: Path | None = None) -> GateResult:
    """The combined gate on the integration head (before accepting a job); `log_to`: where its whole
    output is kept."""
    with _merge_lock(layout):
        checkout, _head = _integration_state(layout, project)
        return run_gate(project, level, checkout, timeout=timeout, env=env, log_to=log_to)


def sync_integration(layout: RepoLayout, project: ProjectConfig, ref: str | None = None) -> dict[str, Any]:
    """Bring the integration branch up to the base branch's head (`ref`: another commit), so a new
    job builds on what the operator committed since: a fast-forward when it can, else a merge
    commit in the integration checkout. A conflict is rolled back and reported (`state: conflict`,
    the files) for the caller to say; nothing is ever rewritten.
    """
    name = ref or base_branch(layout, project, required=False)
    if not name:
        return {"state": "up-to-date", "head": integration_head(layout, project), "reason": "no base branch"}
    base = ref or f"refs/heads/{name}"
    with _merge_lock(layout):
        checkout, head = _integration_state(layout, project)
        target = git(layout.root, "rev-parse", "--verify", f"{base}^{{commit}}")
        if head == target or git_ok(checkout, "merge-base", "--is-ancestor", target, head):
            return {"state": "up-to-date", "head": head}
        if git_ok(checkout, "merge-base", "--is-ancestor", head, target):
            git(checkout, "merge", "-q", "--ff-only", target)
            return {"state": "fast-forwarded", "head": target, "previous": head}
        proc = git_run(checkout, "-c", "core.hooksPath=/dev/null", "merge", "--no-ff", "--no-edit",
                       "-m", f"Bring {name} into {project.integration_branch}", target)
        if proc.returncode != 0:
            conflicts = [p for p in git(checkout, "diff", "--name-only", "--diff-filter=U").splitlines() if p]
            _rollback(checkout, head)
            return {"state": "conflict", "head": head, "base": target, "conflicts": conflicts}
        return {"state": "merged", "head": git(checkout, "rev-parse", "HEAD"), "previous": head, "base": target}
