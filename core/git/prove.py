"""Each gate run once on the base commit, confined like a real gate, before any worker is spent.

`init` does it after writing the settings and `check --gates` on demand: a gate whose command does
not exist, that fails on the base (every task would then fail it, through no fault of its own) or
that runs no tests is named with the fix. Each proof says what the gate ran (interpreter or
toolchain), how long it took and what it counted; a gate whose counts cannot be read says that
the weakened-test checks are off for it.

It runs in a throwaway detached worktree of HEAD under the repository's worktree folder, with the
project's `setup:` first, exactly as a task's worktree is prepared, and removes it afterwards.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from pilothouse.core.git.gates import DEFAULT_TIMEOUT_S, GateResult, run_gate, run_setup
from pilothouse.core.git.worktrees import git, git_run, worktree_root
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import ProjectConfig

PROVE_DIR = "_prove"  # under worktree_root: no job is named so (job names start with a letter or digit)
COUNTS_OFF = ("printed no test counts pilothouse can read: the weakened-test checks (fewer tests, more "
              "skipped) are off for it")


@dataclass
class Proof:
    levels: list[str]  # the gates that run this command (fast and full are often the same)
    command: str
    passed: bool
    exit_code: int | None
    duration_s: float
    counts: dict[str, Any] | None
    toolchain: str | None
    base: str  # the commit it ran on
    output_tail: str = ""
    finding: str | None = None  # why it cannot serve as a gate, with the fix; None when it can
    notes: list[str] = field(default_factory=list)  # what holds but weakens it (no counts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line: `gate fast: passed — 41 passed, 2 skipped (junit) in 1.2s, ran …`."""
        what = "passed" if self.passed else "FAILED"
        counts = counts_words(self.counts) if self.counts else "no counts"
        ran = f", ran {self.toolchain}" if self.toolchain else ""
        return (f"gate {'/'.join(self.levels)} ({self.command}): {what} on {self.base[:10]} — {counts} in "
                f"{self.duration_s:.1f}s{ran}")


def counts_words(counts: dict[str, Any]) -> str:
    from pilothouse.core.git.gate_counts import counts_text

    return f"{counts_text(counts)} ({counts.get('source') or '?'})"


def _finding(res: GateResult, levels: list[str], base: str) -> str | None:
    field_ = "/".join(f"gates.{lv}" for lv in levels)
    label = f"gate {'/'.join(levels)} ({res.command})"
    if res.exit_code is None and not res.timed_out and res.reason:
        return res.reason  # not found, cannot run confined: already says the fix
    if res.timed_out:
        return f"{label} timed out on the base commit {base[:10]}: make it faster or raise the gate timeout"
    if not res.passed:
        last = next((ln.strip() for ln in reversed(res.output_tail.splitlines()) if ln.strip()), "")
        counts = f", {counts_words(res.counts)}" if res.counts else ""
        return (f"{label} fails on the base commit {base[:10]} ({res.reason}{counts}; last line: {last[:160]!r}): "
                f"every task would fail it — fix the tests on the base, or {field_} in .ai/project.yaml "
                "(`pilothouse init --dry-run` lists the candidates)")
    if res.counts is not None and int(res.counts.get("collected", 0)) == 0:
        return (f"{label} runs no tests on the base commit {base[:10]}: name the command that runs them in "
                f"{field_} (`pilothouse init --dry-run` lists the candidates)")
    return None


def prove(layout: RepoLayout, project: ProjectConfig, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[Proof]:
    """Every distinct gate command run once on HEAD, in a throwaway worktree; a proof each."""
    base = git(layout.root, "rev-parse", "HEAD")
    by_command: dict[str, list[str]] = {}
    for level, command in project.gates.items():
        by_command.setdefault(command, []).append(level)
    where = worktree_root(layout) / PROVE_DIR / uuid.uuid4().hex[:12]
    where.parent.mkdir(parents=True, exist_ok=True)
    git(layout.root, "worktree", "add", "-q", "--detach", str(where), base)
    try:
        setup = run_setup(project, where, timeout=timeout)
        if setup is not None:
            return [Proof(levels, command, False, setup.exit_code, setup.duration_s, None, setup.toolchain, base,
                          setup.output_tail, f"setup ({setup.command}) fails on the base commit {base[:10]}: "
                                             f"{setup.reason} — fix setup: in .ai/project.yaml")
                    for command, levels in by_command.items()]
        out = []
        for command, levels in by_command.items():
            res = run_gate(project, levels[0], where, timeout=timeout)
            proof = Proof(levels, command, res.passed, res.exit_code, res.duration_s, res.counts, res.toolchain,
                          base, res.output_tail, _finding(res, levels, base))
            if res.passed and res.counts is None:
                proof.notes.append(f"gate {'/'.join(levels)} {COUNTS_OFF}; pytest, unittest, TAP (tape, node "
                                   "--test), jest, vitest, go test -v/-json and cargo test are read")
            out.append(proof)
        return out
    finally:
        if git_run(layout.root, "worktree", "remove", "--force", str(where)).returncode != 0:
            shutil.rmtree(where, ignore_errors=True)
            git(layout.root, "worktree", "prune", check=False)


def findings(proofs: list[Proof]) -> list[str]:
    return [p.finding for p in proofs if p.finding]
