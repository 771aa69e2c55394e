"""What a reply will do to the work, in one line, for the replies that merge, cancel or discard it.

The cockpit asks before sending any of them (Enter means no): one key must never merge work that
weakened its gate, or cancel a chain of tasks. The line names what the operator would otherwise
have to open the dialog, the diff or the gate log to learn: the weakened tests, the files that
merge, the tasks cancelled.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Any

from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.core.stops.problems import Problem
    from pilothouse.tui.app import CockpitApp

# the replies that can take work into the integration branch or throw it away
ASKS_FIRST = frozenset({"accept", "skip"})


def weakened_line(evidence: dict[str, Any], limit: int = 3) -> str:
    """`tests/test_ui.py: 3 assertion line(s) fewer; tests/test_x.py deleted (+1 more)`."""
    items = [w for w in evidence.get("weakened") or [] if isinstance(w, dict)]
    parts = []
    for w in items[:limit]:
        where = str(w.get("path") or "")
        detail = str(w.get("detail") or w.get("kind") or "")
        kind = str(w.get("kind") or "")
        if kind == "test_deleted":
            detail = "test file deleted"
        elif kind == "skip_added":
            detail = f"skip added ({detail})"
        parts.append(f"{where}: {detail}" if where else detail)
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(parts) + more


def _files_line(app: CockpitApp, problem: Problem, limit: int = 3) -> str:
    """The task's changed files against its base, `3 files: src/a.py +4 -1, …`; '' when unknown."""
    q, layout = app.queries, app.layout
    if q is None or layout is None or not problem.task:
        return ""
    task = q.task(problem.job, problem.task)
    if task is None:
        return ""
    from pilothouse.tui.screens.diff import task_diff

    try:
        files, note = task_diff(layout, task, app._base(task))
    except (UserError, subprocess.SubprocessError, OSError):
        return ""
    if not files:
        return note
    shown = ", ".join(f"{f.path} +{f.added} -{f.removed}" for f in files[:limit])
    more = f", +{len(files) - limit} more" if len(files) > limit else ""
    return f"{len(files)} file{'s' * (len(files) != 1)}: {shown}{more}"


def skip_cancels(app: CockpitApp, problem: Problem) -> list[str]:
    """The tasks `skip` cancels (the problem's and every one depending on it), as core will."""
    layout = app.layout
    assert layout is not None
    try:
        from pilothouse.core.stops import problems

        return problems.skip_preview(layout, problem.code)
    except ImportError:
        return [problem.task] if problem.task else []


def consequence(app: CockpitApp, problem: Problem, reply: str) -> str | None:
    """The one line the confirmation shows, or None when `reply` takes nothing in and throws nothing
    away (retry, hint, plan and dismiss leave the work where it is). Raises UserError when core
    refuses to say (a skip of a problem already gone)."""
    what = problem.task or f"job {problem.job}"
    if reply == "skip":
        cancels = skip_cancels(app, problem)
        return (f"Skip {what}: cancels {', '.join(cancels) or 'nothing'}; their work is never merged "
                "(branches and worktrees are kept).")
    if reply != "accept":
        return None
    if problem.task is None:
        return (f"Accept job {problem.job} as it is, its {problem.kind.replace('_', ' ')} unresolved: "
                "the integration branch becomes the job's result.")
    files = _files_line(app, problem)
    files = f" ({files})" if files else ""
    if problem.kind == "gate_weakened":
        weak = weakened_line(problem.evidence) or "its tests"
        return f"Merge {what} with its gate weakened: {weak}{files}; kept as a decision of the job."
    if problem.kind == "unchanged_resubmission":
        return f"Take {what}'s resubmitted commit unchanged{files}: its checks run, then it merges."
    if problem.kind == "review_rejected":
        return f"Accept {what} as it is{files}: the reviewer rejected it every round; it merges with the findings open."
    return f"Accept {what} as it is{files}: its checks run, then it merges."
