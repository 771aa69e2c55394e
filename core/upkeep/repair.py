"""`pilothouse maintain repair`: a new state.db from what survives it — the committed records
(`.ai/jobs/`, `.ai/tasks.yaml`) and the event log.

What the log says is rebuilt: each job's revision, how far it was planned and its last announced
state; each task's last state and its graph; the problems still open. A step that was under way
when the store was lost (a builder running, a merge) cannot be picked up where it was, so the task
goes back to the last point that is safe to repeat. Each finished run comes back from its
run.started and run.finished (with run.usage's breakdown), so the job's and its tasks' token counts
and their labels are what they were; a rebuilt run is marked so, and never taken as the answer of a
planning or review step still to come (it has no result: that step runs again). What the log never
held is said, not guessed: runs not finished when the store was lost, usage windows, replies not
yet applied.
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
NOT_RECOVERED = ("runs not finished when the store was lost (their tokens were not counted yet)",
                 "usage windows of the providers",
                 "replies given but not yet applied (answer those problems again)")


@dataclass
class Report:
    moved_to: str | None = None
    jobs: list[str] = field(default_factory=list)
    tasks: int = 0
    runs: int = 0
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
                   f"{self.runs} finished run(s) with their token counts, {len(self.problems)} open problem(s)")
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
    runs: dict[str, dict[str, Any]] = {}
    tailer = EventTailer(layout.events)
    for ev in tailer.iter_new():
        job, task, data, etype = ev.get("job"), ev.get("task"), ev.get("data") or {}, ev["type"]
        if etype.startswith("run.") and isinstance(ev.get("run"), str):
            _note_run(runs, ev, data)
            continue
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
        for run_id, r in runs.items():
            if r.get("finished") is None or r["job"] not in jobs:
                continue
            _insert_run(conn, run_id, r, now)
            report.runs += 1
        # the totals as finish_run keeps them: every finished run's count added to its job and its task
        conn.execute("UPDATE jobs_state SET tokens = (SELECT coalesce(sum(r.tokens), 0) FROM runs r"
                     " WHERE r.job = jobs_state.job)")
        conn.execute("UPDATE tasks SET tokens = (SELECT coalesce(sum(r.tokens), 0) FROM runs r"
                     " WHERE r.job = tasks.job AND r.task = tasks.task)")
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


def _note_run(runs: dict[str, dict[str, Any]], ev: dict[str, Any], data: dict[str, Any]) -> None:
    """What the log says of one run: how it started (run.started), how it ended (run.finished) and
    its token breakdown (the final run.usage, which finish emits after run.finished)."""
    run_id, etype = ev["run"], ev["type"]
    if etype == "run.started":
        runs[run_id] = {**data, "job": ev.get("job"), "task": ev.get("task"), "started": ev.get("ts"),
                        "finished": None, "end": {}, "breakdown": None}
    elif run_id in runs and etype == "run.finished":
        runs[run_id].update(finished=ev.get("ts"), end=data)
    elif run_id in runs and etype == "run.usage" and data.get("final") and isinstance(data.get("tokens"), dict):
        runs[run_id]["breakdown"] = data["tokens"]


def _insert_run(conn: Any, run_id: str, r: dict[str, Any], now: str) -> None:
    from pilothouse.providers.usage import LABELS

    end = r["end"]
    tokens, cost = end.get("tokens"), end.get("cost_usd")
    counted = tokens if type(tokens) is int and tokens > 0 else 0
    verdict = {"type": "pilothouse.verdict", "schema": 1, "run_id": run_id, "provider": _text(r.get("provider")),
               "mode": _text(r.get("mode")), "verdict": _text(end.get("verdict")), "tokens": r["breakdown"],
               "cost_usd": cost, "usage": end["usage"] if end.get("usage") in LABELS else "measured",
               "parse_state": _text(end.get("parse_state")), "duration_s": end.get("duration_s"),
               "error": _text(end.get("error")), "reason": _text(end.get("reason")), "result": None,
               "session_id": None, "rebuilt": True}
    attempt = r.get("attempt")
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, model, mode, attempt, state, verdict, tokens,"
                 " cost_usd, log, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,'finished',?,?,?,?,?,?)",
                 (run_id, r["job"], _text(r.get("task")), _text(r.get("role")) or "builder",
                  _text(r.get("provider")) or "unknown", _text(r.get("model")), _text(r.get("mode")) or "build",
                  attempt if type(attempt) is int else 0, json.dumps(verdict), counted,
                  float(cost) if type(cost) in (int, float) else 0.0, _text(r.get("log")),
                  r.get("started") or now, r.get("finished") or now))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
