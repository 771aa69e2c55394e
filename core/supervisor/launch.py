"""What the supervisor tells each worker, and how a launch is recorded and spawned.

The texts below are the task text dispatch puts after the mode preamble: they carry the lines
`job: <job>` and `task: <id>` (reviewers also `review round: <n>`) that scripts, logs and the
cockpit key on. Prompts are short and factual: the worker reads the code itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.dispatch.runs import Launch

if TYPE_CHECKING:
    from pilothouse.core.supervisor.loop import Supervisor

BRIEF_LIMIT = 4000
_KEY_FILES = ("README.md", "README.rst", "README", "pyproject.toml", "package.json", "setup.cfg", "Cargo.toml",
              "go.mod")


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def repo_summary(checkout: Path, limit: int = BRIEF_LIMIT) -> str:
    """A compact picture of the repository: its file tree, then the head of its key files."""
    from pilothouse.core.git.worktrees import git
    from pilothouse.providers.workerfs import read_in_tree

    files = [f for f in git(checkout, "ls-files").splitlines() if f and not f.startswith(".ai/")]
    tree = "\n".join(files[:150]) + (f"\n… and {len(files) - 150} more files" if len(files) > 150 else "")
    parts = [f"Files ({len(files)}):\n{tree}"]
    budget = limit - len(parts[0]) - 200
    for name in _KEY_FILES:
        if budget <= 200:
            break
        take = min(budget - 50, 1200)
        # the checkout holds what builders merged: a key file may be a link to a file of the
        # operator's that no worker could read; it is shown as a link, never followed
        entry = read_in_tree(checkout, name, take * 4)
        if entry.kind == "missing":
            continue
        text = entry.text()
        more = entry.truncated or len(text) > take
        parts.append(f"--- {name} ---\n{text[:take]}" + ("\n…" if more else ""))
        budget -= take + 50
    return "\n\n".join(parts)[:limit]


def _bullets(items: Any) -> str:
    if not items:
        return "(none)"
    if isinstance(items, str):
        return items.strip()
    return "\n".join(f"- {i}" for i in items)


def plan_text(job: Any, name: str, revision: int, summary: str, existing: list[dict[str, Any]]) -> str:
    decisions = _field(job, "decisions") or []
    dec = [_field(d, "text", d) for d in decisions]
    lines = [f"job: {name}", f"revision: {revision}", "",
             "Plan this job as a graph of tasks for builders working in parallel, each in its own worktree.",
             "Give each task the files it writes (expected_paths.write); make a task depend on another when",
             "it needs that task's result. Put implementation and its tests in the same task.",
             "", "## Request", str(_field(job, "request") or "").strip(),
             "", "## Acceptance", _bullets(_field(job, "acceptance")),
             "", "## Decisions", _bullets(dec)]
    if existing:
        lines += ["", "## Tasks already planned (keep the ids of those that stay)",
                  *(f"- {t['task']} ({t['state']})" for t in existing)]
    lines += ["", "## Repository", summary]
    return "\n".join(lines) + "\n"


def build_text(job: str, task: Any) -> str:
    paths = _field(task, "expected_paths")
    write = list(_field(paths, "write") or []) if paths is not None else []
    read = list(_field(paths, "read") or []) if paths is not None else []
    lines = [f"job: {job}", f"task: {_field(task, 'id')}", f"title: {_field(task, 'title')}", "",
             str(_field(task, "description") or "").strip(), "",
             "Files you are expected to write:", _bullets(write)]
    if read:
        lines += ["Files worth reading first:", _bullets(read)]
    lines += ["", "Acceptance:", _bullets(_field(task, "acceptance")), "",
              "Work only in this checkout. Run the project's tests before you finish; "
              "your changes are committed for you."]
    return "\n".join(lines) + "\n"


def test_delta_text(counts: dict[str, Any] | None, base_counts: dict[str, Any] | None,
                    holdout: dict[str, Any] | None, changes: list[str]) -> str:
    """What the reviewer reads before the code: did the tests get stronger or weaker?"""
    keys = ("collected", "passed", "failed", "skipped", "xfailed", "errors")
    lines = ["Tests first (the gate on this change against the same gate on its base):"]
    if counts:
        before = base_counts or {}
        lines.append("  gate on this change: " + ", ".join(
            f"{k} {before[k]} → {counts.get(k, 0)}" if k in before else f"{k} {counts.get(k, 0)}" for k in keys))
    else:
        lines.append("  the gate reported no test counts (the weakened-test checks on counts are off)")
    if holdout and holdout.get("counts"):
        held = holdout["counts"]  # counts only: the holdout's tests are not the reviewer's to see
        lines.append(f"  holdout tests: {held.get('passed', 0)} passed of {held.get('collected', 0)}")
    lines.append("  test and test-settings files changed: " + (", ".join(changes[:30]) if changes else "none"))
    return "\n".join(lines)


def review_text(job: str, task: Any, round_no: int, base: str, stat: str, delta: str = "") -> str:
    return "\n".join([
        f"job: {job}", f"task: {_field(task, 'id')}", f"review round: {round_no}", "",
        *([delta, ""] if delta else []),
        f"title: {_field(task, 'title')}", "",
        str(_field(task, "description") or "").strip(), "",
        "Acceptance:", _bullets(_field(task, "acceptance")), "",
        f"Review the change `git diff {base}...HEAD` in this checkout ({stat or 'no diff stat'}).",
        "Do not edit files. PASS when it does what the task asks, correctly and with tests;",
        "CHANGES with concrete findings otherwise.",
    ]) + "\n"


def combined_review_text(job: str, base: str, stat: str, tasks: list[str]) -> str:
    return "\n".join([
        f"job: {job}", "task: (combined change)", "review round: 1", "",
        f"Review the job's combined change `git diff {base}...HEAD` in this checkout ({stat}).",
        "Tasks merged: " + ", ".join(tasks), "Do not edit files.",
    ]) + "\n"


def start(sup: Supervisor, launch: Launch, *, task_state: str | None = None, reason: str = "",
          fields: dict[str, Any] | None = None, event_extra: dict[str, Any] | None = None) -> None:
    """Record the launch (with the task's state change, one transaction), then spawn it."""
    from pilothouse.core.executor.base import executor_name
    from pilothouse.core.executor.host import settings

    launch.executor = executor_name(settings(sup), launch.role)
    runs.write_spec(sup.layout, launch)
    sql = runs.record_sql(launch)
    if launch.task and task_state:
        assert launch.job is not None
        sup.store.set_task(launch.job, launch.task, task_state, reason, also=[sql], run_id=launch.run_id,
                           **(fields or {}))
    else:
        sup.store._txn([sql])
    spawn(sup, launch, event_extra)


def spawn(sup: Supervisor, launch: Launch, event_extra: dict[str, Any] | None = None) -> None:
    """Spawn a recorded launch where its spec says and watch it; used for new launches and for
    recorded-but-unspawned ones."""
    sup.executors.of(launch, sup.layout).launch(sup, launch, event_extra)


def verdict_of(row: Any) -> dict[str, Any]:
    try:
        value = json.loads(row["verdict"] or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
