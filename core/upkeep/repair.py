"""`pilothouse maintain repair`: a new state.db from what survives it — the committed records
(`.ai/jobs/`, `.ai/tasks.yaml`) and the event log.

What the log says is rebuilt: each job's revision, how far it was planned and its last announced
state; each task's last state and its graph; the problems still open. A step that was under way
when the store was lost (a builder running, a merge) cannot be picked up where it was, so the task
goes back to the last point that is safe to repeat. What the log never held is said, not guessed:
run history and token counts, usage windows, replies not yet applied.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from pilothouse.core.records import state_witness
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventTailer, utc_now_iso
from pilothouse.providers.errors import UserError

# a step that was under way → where it safely starts again (worktrees and branches are kept)
_REPEAT = {"running": "ready", "reviewing": "gating", "merging": "approved", "preparing": "ready"}
NOT_RECOVERED = ("run history and token counts", "usage windows of the providers",
                 "replies given but not yet applied (answer those problems again)")


@dataclass
class Report:
    moved_to: str | None = None
    jobs: list[str] = field(default_factory=list)
    tasks: int = 0
    problems: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    skipped_lines: int = 0
    lost: list[str] = field(default_factory=list)   # what the store had lost although it opened
    not_recovered: tuple[str, ...] = NOT_RECOVERED

    def lines(self) -> list[str]:
        out = []
        if self.lost:
            out.append("the store had lost " + ", ".join(self.lost))
        if self.moved_to:
            out.append(f"the damaged store was kept as {self.moved_to}")
        out.append(f"rebuilt {len(self.jobs)} job(s) ({', '.join(self.jobs) or 'none'}), {self.tasks} task(s), "
                   f"{len(self.problems)} open problem(s)")
        if self.restarted:
            out.append("steps under way start again: " + ", ".join(self.restarted))
        if self.skipped_lines:
            out.append(f"skipped {self.skipped_lines} line(s) of the event log that are not events")
        out.append("not recovered: " + "; ".join(self.not_recovered))
        return out


def repair(layout: RepoLayout, *, force: bool = False) -> Report:
    from pilothouse.core.supervisor import control

    if control.status(layout) is not None:
        raise UserError("a supervisor is running: `pilothouse job stop` first, then repair")
    report = Report()
    db = layout.state_db
    if not db.exists() and not db.is_symlink() and not layout.events.exists() and not layout.jobs_dir.is_dir():
        raise UserError(f"nothing to repair in {layout.root}: pilothouse has kept no state here "
                        "(`pilothouse init` sets a repository up)")
    if db.exists() or db.is_symlink():
        try:
            report.lost = state_witness.lost(layout)
            if not report.lost and not force:
                raise UserError(f"{db} is readable, of this version, and holds every job and open problem "
                                "the records and the event log name: nothing to repair (--force rebuilds "
                                "it anyway from .ai/ and the event log)")
        except store.StateDamaged:  # a held lock (StateBusy) is no damage: said as it is
            pass
        report.moved_to = _move_aside(layout)
    _rebuild(layout, report)
    return report


def _move_aside(layout: RepoLayout) -> str:
    stamp = utc_now_iso().replace(":", "").replace("-", "").replace(".", "")
    kept = layout.state_db.with_name(f"state.db.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = layout.state_db.with_name(layout.state_db.name + suffix)
        if src.exists():
            os.replace(src, kept.with_name(kept.name + suffix))
    return str(kept)


def _rebuild(layout: RepoLayout, report: Report) -> None:
    from pilothouse.core.records.jobs import list_jobs
    from pilothouse.core.records.taskgraph import load_tasks

    jobs: dict[str, dict[str, Any]] = {j.name: {"revision": j.revision, "state": "created", "reason": None,
                                               "planned": 0, "finished": None} for j in list_jobs(layout)}
    tasks: dict[tuple[str, str], dict[str, Any]] = {}
    problems: dict[str, dict[str, Any]] = {}
    tailer = EventTailer(layout.events)
    for ev in tailer.iter_new():
        job, task, data, etype = ev.get("job"), ev.get("task"), ev.get("data") or {}, ev["type"]
        if etype.startswith("problem.") and isinstance(data.get("code"), str):
            if etype == "problem.opened" and job:
                problems[data["code"]] = {"job": job, "task": task, **data, "at": ev.get("ts")}
            elif etype == "problem.closed":
                problems.pop(data["code"], None)
            continue
        if job not in jobs:
            continue
        if task is None and etype.startswith("job."):
            j = jobs[job]
            if isinstance(data.get("state"), str):
                j["state"], j["reason"] = data["state"], _text(data.get("reason"))
            if etype == "job.planned" and type(data.get("revision")) is int:
                j["planned"] = data["revision"]
            if etype == "job.accepted":
                j["finished"] = ev.get("ts")
        elif task is not None and etype == "task.state" and isinstance(data.get("to"), str):
            tasks[(job, task)] = {"state": data["to"], "reason": _text(data.get("reason"))}
    report.skipped_lines = tailer.skipped
    for j in list_jobs(layout):
        done = j.finished()
        if done is not None and jobs[j.name]["state"] == "created":
            # the event log did not survive (a fresh clone): the committed record says how it ended
            jobs[j.name].update(state=done.state, reason=done.says(), planned=j.revision, finished=done.at)
    graph = {(t.job_id, t.id): t for t in load_tasks(layout)}
    now = utc_now_iso()
    conn = store.connect(layout.state_db, rebuild=True)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for name, j in jobs.items():
            conn.execute("INSERT INTO jobs_state(job, state, revision, planned_revision, reason, created_at,"
                         " updated_at, finished_at) VALUES (?,?,?,?,?,?,?,?)",
                         (name, j["state"], j["revision"], min(j["planned"], j["revision"]),
                          j["reason"] or "rebuilt from the event log", now, now, j["finished"]))
            report.jobs.append(name)
        for (job, task), t in tasks.items():
            d = graph.get((job, task))
            state = _REPEAT.get(t["state"], t["state"])
            if state != t["state"]:
                report.restarted.append(f"{job}/{task} ({t['state']} → {state})")
            conn.execute("INSERT INTO tasks(job, task, state, kind, depends_on, reason, updated_at)"
                         " VALUES (?,?,?,?,?,?,?)",
                         (job, task, state, d.kind if d else "SAFE_PARALLEL",
                          json.dumps(list(d.depends_on) if d else []),
                          t["reason"] if state == t["state"] else "state.db rebuilt: this step runs again", now))
            report.tasks += 1
        for code, p in problems.items():
            if p["job"] not in jobs:
                continue
            replies: list[Any] = p["replies"] if isinstance(p.get("replies"), list) else ["retry"]
            conn.execute("INSERT INTO problems(code, job, task, kind, summary, evidence, replies, state, opened_at)"
                         " VALUES (?,?,?,?,?,?,?,'open',?)",
                         (code, p["job"], p["task"], _text(p.get("kind")) or "unknown",
                          _text(p.get("summary")) or "(rebuilt from the event log)",
                          json.dumps(p.get("evidence") if isinstance(p.get("evidence"), dict) else {}),
                          json.dumps([str(r) for r in replies]), p.get("at") or now))
            report.problems.append(code)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        conn.close()
        for suffix in ("", "-wal", "-shm"):  # nothing half-written: the next repair starts clean
            layout.state_db.with_name(layout.state_db.name + suffix).unlink(missing_ok=True)
        raise
    conn.close()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
