"""What the run detail shows of a task, as text: its header, the gate, the review, the diff stat, the
log paths, and the events they come from. The screen (detail.py) decides when each is drawn.

Reading is kept off the screen's own thread where it can be slow: the task's gate and review events
come through the event index (one task's lines of a log of millions, never a scan of its tail), and
the diff stat from git.
"""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries.work import TASK_ACTIVE, RunRow, TaskRow, run_log_paths
from pilothouse.tui import format as fmt
from rich.text import Text

if TYPE_CHECKING:
    from pilothouse.core.records.layout import RepoLayout

SIDE_EVENTS = frozenset({"gate.finished", "review.finished"})


def task_events(layout: RepoLayout, job: str, task: str | None, types: frozenset[str] = SIDE_EVENTS) -> list[dict[str, Any]]:
    """The task's events of `types`, oldest first, through the event index (it catches up with the log
    first: call it from a worker thread)."""
    from pilothouse.core.state.event_index import EventLookup

    with EventLookup(layout.events) as lookup:
        if task is None:  # the job's own (its full gate, a combined review): select(job) is every task's too
            return [e for e in lookup.select(job, types=types) if e.get("task") is None]
        return lookup.select(job, task, types=types)


def head_text(task: TaskRow, run_id: str | None, totals: dict[str, int], now: datetime,
              pauses: list[Any]) -> Text:
    end = None if task.state in TASK_ACTIVE else task.updated_at
    # the store's count lags a running worker's own reports: the stream's running total is newer
    streamed = sum(totals.get(k, 0) for k in ("input", "output"))
    t = fmt.styled(f"{task.job} / ", "dim") + Text(task.task, style="bold") + Text("  ")
    t += fmt.state_text(task.state)
    t += Text(f"  {task.kind}  attempt {task.attempt}  review round {task.review_round}", style="dim")
    t += Text(f"\nworker {task.worker or '—'}  run {run_id or '—'}  "
              f"tokens {fmt.tokens(max(task.tokens, streamed), task.usage)}"
              f"  elapsed {fmt.worked(task.started_at, end, now, pauses) or '—'}")
    if task.activity:
        t += Text(f"  now: {fmt.words(task.activity)}", style="cyan")
    if task.reason:
        t += Text(f"\n{fmt.words(task.reason)}", style="yellow")
    return t


def job_head_text(job: str, run: RunRow | None, totals: dict[str, int], now: datetime) -> Text:
    """The head of the job's own runs (task None): no task, so the run shown is the subject."""
    streamed = sum(totals.get(k, 0) for k in ("input", "output"))
    t = fmt.styled(f"{job} / ", "dim") + Text("(job)", style="bold")
    t += Text("  the job's own runs: its planner, a combined review", style="dim")
    if run is None:
        return t + Text("\nno run of the job's own in the store", style="dim")
    from pilothouse.providers.registry import labelled

    t += Text(f"\n{run.role} {run.mode} on {labelled(run.provider)}  run {run.run_id}  ")
    t += fmt.state_text(run.state)
    t += Text(f"  tokens {fmt.tokens(max(run.tokens, streamed), run.usage)}"
              f"  elapsed {fmt.worked(run.started_at, run.finished_at, now) or '—'}")
    why = (run.verdict or {}).get("reason")
    if why:
        t += Text(f"\n{fmt.words(str(why))}", style="yellow")
    return t


def gate_text(events: list[dict[str, Any]]) -> Text:
    if not events:
        return Text("no gate has run for this task yet", style="dim")
    ev = events[-1]
    data = ev.get("data") or {}
    ok = data.get("passed", data.get("exit_code") == 0)
    out = fmt.styled(f"{fmt.clock(ev.get('ts'))} ", "dim")
    out.append(f"{data.get('level') or data.get('gate') or 'gate'} ", style="bold")
    out.append("passed" if ok else "failed", style="green" if ok else "bold red")
    if data.get("command"):
        out.append(f"\n$ {data['command']}", style="dim")
    if "exit_code" in data:
        out.append(f"  (exit {data['exit_code']})", style="dim")
    counts = data.get("counts")
    if isinstance(counts, dict):
        out.append(f"\n{counts_line(counts)}", style="bold")
    tail = data.get("output_tail") or data.get("output") or data.get("tail") or ""
    for line in str(tail).rstrip().splitlines()[-15:]:
        out.append(f"\n{line}")
    return out


def counts_line(counts: dict[str, Any]) -> str:
    """'9 tests: 3 passed · 2 failed · 2 skipped · 1 xfailed · 1 errors (junit)': passed, failed and
    skipped always (core's counts_text, as every view of a gate's counts), xfailed and errors if any."""
    from pilothouse.core.git.gate_counts import counts_text

    source = f" ({counts['source']})" if counts.get("source") else ""
    return counts_text(counts, " · ") + source


def findings_text(runs: list[RunRow], events: list[dict[str, Any]]) -> Text:
    findings: list[dict[str, Any]] = []
    overall = None
    for r in runs:
        result = (r.verdict or {}).get("result") if r.role == "reviewer" else None
        if isinstance(result, dict):
            overall = result.get("overall", overall)
            findings = list(result.get("findings") or [])
    if overall is None and events:
        data = events[-1].get("data") or {}
        overall = data.get("overall")
        found = data.get("findings")
        findings = list(found) if isinstance(found, list) else \
            [{"summary": s} for s in data.get("summaries") or [] if isinstance(data["summaries"], list)]
    if overall is None:
        return Text("no review yet", style="dim")
    out = fmt.styled(str(overall), "green bold" if overall == "PASS" else "bold red")
    for f in findings:
        if isinstance(f, dict):
            out.append(f"\n• [{f.get('severity', '?')}] ", style="yellow")
            out.append(f"{f.get('file_line', '')} ", style="dim")
            out.append(str(f.get("summary", "")))
    return out


def diff_stat(layout: RepoLayout, task: TaskRow) -> str:
    """The branch's diff stat against the integration branch (core/git/checkout.py), read-only."""
    from pilothouse.core.git import checkout
    from pilothouse.core.git.worktrees import SAFE_GIT
    from pilothouse.core.records import project

    # where its worktree started, else its job's integration line
    base = task.base or f"{project.load_project(layout).integration_branch}/{task.job}"
    if task.worktree and Path(task.worktree).exists():
        stat = checkout.diff_stat(task.worktree, base)
        return str(stat.get("text") or "no changes yet")
    if not task.branch:
        return "no branch yet"
    # the worktree is gone (merged, cleaned up): the branch still tells
    proc = subprocess.run([*SAFE_GIT, "diff", "--shortstat", f"{base}...{task.branch}"], cwd=layout.root,
                          capture_output=True, text=True, timeout=10)
    return proc.stdout.strip() or proc.stderr.strip() or "no changes"


def logs_text(layout: RepoLayout, run: RunRow | None) -> Text:
    logs = fmt.styled("\nlogs\n", "bold underline")
    if run is not None:
        files = run_log_paths(run.provider, run.run_id, run.log)
        logs.append(fmt.tilde(files["events"].parent) + "/\n", style="dim")
        for path in files.values():
            logs.append(f"  {path.name}\n")
    # directory, then the file on its own line, as for the run's logs: a long path never
    # wraps in the middle of a name
    logs.append(fmt.tilde(layout.supervisor_log.parent) + "/\n", style="dim")
    logs.append(f"  {layout.supervisor_log.name}")
    return logs


def section(title: str, body: Text | str, first: bool = False) -> Text:
    return fmt.styled(("" if first else "\n") + title + "\n", "bold underline") + \
        (body if isinstance(body, Text) else Text(body))
