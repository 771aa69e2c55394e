"""CLI group 'jobs': the user's requests and where they stand.

    pilothouse job create NAME --request-file F [--acceptance-file A] [--attach IMG ...]
    pilothouse job update NAME --request-file F [--attach IMG ...]
    pilothouse job decide NAME TEXT
    pilothouse job list [--json]
    pilothouse job status [NAME] [--json]
(the supervise group adds job start / stop / wait / plan-ready to the same parser, job_end cancel
and delete)
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def _add_repo(p: Any) -> None:
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")


def _add_json(p: Any) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(sub: Any) -> None:
    p = sub.add_parser("job", aliases=["jobs"], help="create, correct and inspect jobs",
                       description="A job is one outcome you can accept, written in your own words. "
                                   "Records live in .ai/jobs/<job>.json (commit them).")
    job_sub = p.add_subparsers(dest="job_cmd", metavar="ACTION")

    c = job_sub.add_parser("create", help="a new job from a request file")
    c.add_argument("name", help="job name: lowercase letters, digits and '-' (e.g. first-draft)")
    c.add_argument("--request-file", required=True, metavar="F", help="the request, in product terms ('-': stdin)")
    c.add_argument("--acceptance-file", metavar="A", help="acceptance criteria")
    c.add_argument("--attach", nargs="+", default=[], metavar="IMG",
                   help="screenshots: PNG, JPEG, GIF or WebP, up to 10 per job, 8 MB each")
    c.add_argument("--sim-scenario", metavar="FILE",
                   help="script every run of this job with a simulator scenario (a YAML file or a scenario "
                        "name): all its roles then run on the sim provider (docs/scenarios.md)")
    _add_repo(c)
    _add_json(c)
    c.set_defaults(func=_create)

    u = job_sub.add_parser("update", help="add a correction (a new revision; the original is kept)")
    u.add_argument("name")
    u.add_argument("--request-file", required=True, metavar="F", help="the correction ('-': stdin)")
    u.add_argument("--acceptance-file", metavar="A", help="replace the acceptance criteria")
    u.add_argument("--attach", nargs="+", default=[], metavar="IMG", help="more screenshots")
    _add_repo(u)
    _add_json(u)
    u.set_defaults(func=_update)

    d = job_sub.add_parser("decide", help="record a decision the planner must respect")
    d.add_argument("name")
    d.add_argument("text", nargs="+", help="the decision, in words")
    _add_repo(d)
    _add_json(d)
    d.set_defaults(func=_decide)

    ls = job_sub.add_parser("list", help="every job of this repository")
    _add_repo(ls)
    _add_json(ls)
    ls.set_defaults(func=_list)

    st = job_sub.add_parser("status", help="a job's state and its tasks (all jobs without NAME)")
    st.add_argument("name", nargs="?")
    _add_repo(st)
    _add_json(st)
    st.set_defaults(func=_status)

    p.set_defaults(func=_list, repo=None, json=False)
    from pilothouse.core.commands import supervise

    hook = getattr(supervise, "register_job_subcommands", None)
    if hook is not None:
        hook(job_sub)
    from pilothouse.core.commands import job_end

    job_end.register_job_subcommands(job_sub)


def _layout(args: Any) -> Any:
    from pilothouse.core.records.layout import find_repo

    return find_repo(getattr(args, "repo", None))


def _read(path: str | None, what: str) -> str | None:
    from pilothouse.core.records.jobs import MAX_REQUEST_CHARS
    from pilothouse.core.records.layout import read_text
    from pilothouse.providers.errors import UserError

    if path is None:
        return None
    try:
        return read_text(path, f"{what} {path}", MAX_REQUEST_CHARS,
                         not_text_fix="save it as UTF-8 (images go in --attach)",
                         too_long_fix="shorten it and put details in files in the repository")
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file") from None


def _scenario(given: str) -> str:
    """The scenario as the job records it (a file by its absolute path), checked now: a broken
    one is one line here, not a crashed assigner later."""
    from pathlib import Path

    from pilothouse.providers.sim.scenario import load_scenario

    load_scenario(given)
    path = Path(given).expanduser()
    return str(path.resolve()) if path.is_file() else given


def _summary(job: Any) -> dict[str, Any]:
    return {"name": job.name, "revision": job.revision, "created_at": job.created_at,
            "decisions": len(job.decisions), "attachments": len(job.attachments),
            "coordinator": job.coordinator.model_dump() if job.coordinator else None,
            "request": job.request}


def _create(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records import jobs
    from pilothouse.core.records.project import load_project

    layout = _layout(args)
    load_project(layout)  # not set up (or a broken project.yaml): say so now, not when the job starts
    scenario = _scenario(args.sim_scenario) if getattr(args, "sim_scenario", None) else None
    job = jobs.create_job(layout, args.name, _read(args.request_file, "--request-file") or "",
                          acceptance=_read(args.acceptance_file, "--acceptance-file"), attachments=args.attach,
                          sim_scenario=scenario)
    if args.json:
        emit_json(job.model_dump(mode="json"))
    else:
        extra = f", {len(job.attachments)} screenshot(s)" if job.attachments else ""
        print(f"created job {job.name} (revision 1{extra}): .ai/jobs/{job.name}.json")
        print(f"next: pilothouse job start {job.name}")
    return 0


def _update(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records import jobs

    layout = _layout(args)
    job = jobs.update_job(layout, args.name, _read(args.request_file, "--request-file") or "",
                          attachments=args.attach, acceptance=_read(args.acceptance_file, "--acceptance-file"))
    if args.json:
        emit_json(job.model_dump(mode="json"))
    else:
        print(f"job {job.name} is now at revision {job.revision}; new launches and merges wait for the re-plan "
              "(earlier results stay inspectable)")
    return 0


def _decide(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records import jobs

    job = jobs.decide(_layout(args), args.name, " ".join(args.text))
    if args.json:
        emit_json(job.decisions[-1].model_dump())
    else:
        print(f"recorded decision #{len(job.decisions)} for job {job.name}")
    return 0


def job_states(layout: Any, with_problems: bool = False) -> Any:
    """(jobs_state rows by job, task rows by job[, open problems by job]) from state.db, read-only;
    empty when the store does not exist yet."""
    import json
    import sqlite3

    from pilothouse.core.state.store import open_reader, unusable

    empty: Any = ({}, {}, {}) if with_problems else ({}, {})
    # a store that is lost, damaged or locked is said as such: "not started" would be a lie
    conn = open_reader(layout.state_db)
    if conn is None:
        return empty
    try:
        from pilothouse.core.queries.work import usage_label, usage_sql

        def labelled(r: Any) -> dict[str, Any]:
            row = dict(r)
            return {**row, "usage": usage_label(row.pop("usages"))}

        states = {r["job"]: labelled(r) for r in conn.execute(
            f"SELECT j.*, {usage_sql('r.job = j.job')} AS usages FROM jobs_state j")}
        tasks: dict[str, list[dict[str, Any]]] = {}
        for r in conn.execute(f"SELECT t.*, {usage_sql('r.job = t.job AND r.task = t.task')} AS usages "
                              "FROM tasks t ORDER BY t.job, t.started_at IS NULL, t.started_at, t.task"):
            tasks.setdefault(r["job"], []).append(labelled(r))
        if not with_problems:
            return states, tasks
        problems: dict[str, list[dict[str, Any]]] = {}
        for r in conn.execute("SELECT code, job, task, kind, summary, replies FROM problems "
                              "WHERE state != 'closed' ORDER BY opened_at"):
            item = dict(r)
            try:
                item["replies"] = json.loads(item["replies"] or "[]")
            except ValueError:
                item["replies"] = []
            problems.setdefault(r["job"], []).append(item)
        return states, tasks, problems
    except sqlite3.Error as exc:
        raise unusable(layout.state_db, exc) from None
    finally:
        conn.close()


def supervisor_info(layout: Any) -> dict[str, Any]:
    """{running, pid, heartbeat_at, heartbeat_age_s} of the repository's supervisor."""
    import sqlite3

    from pilothouse.core.supervisor import control as supervisor_ctl

    try:
        row = supervisor_ctl.status(layout)
    except (sqlite3.Error, OSError):  # an unreadable store must not hide the jobs
        row = None
    if row is None:
        from pilothouse.core.supervisor.health import last_stop

        return {"running": False, "pid": None, "heartbeat_at": None, "heartbeat_age_s": None,
                "stopped_because": last_stop(layout)}
    return {"running": True, "pid": row["pid"], "heartbeat_at": row["heartbeat_at"],
            "heartbeat_age_s": row["heartbeat_age_s"]}


def supervisor_line(sup: dict[str, Any]) -> str:
    if not sup["running"]:
        if sup.get("stopped_because"):
            return f"supervisor: not running: {sup['stopped_because']}"
        return "supervisor: not running (start it: pilothouse job start)"
    age = sup["heartbeat_age_s"]
    beat = f", heartbeat {age:.0f}s ago" if age is not None else ", no heartbeat yet"
    return f"supervisor: pid {sup['pid']}{beat}"


def _recorded(job: Any) -> str:
    """A job the store does not know yet (a fresh clone): its recorded outcome, else not started."""
    done = job.finished()
    return str(done.state) if done is not None else "not started"


def list_rows(layout: Any) -> list[dict[str, Any]]:
    """Every job with its state and task counts: `job list --json`, and the MCP server's job_list."""
    from pilothouse.core.records import jobs

    states, tasks = job_states(layout)
    rows = []
    listed = jobs.list_jobs(layout)
    _require_rows(layout, [j.name for j in listed], states)
    for j in listed:
        st = states.get(j.name)
        ts = tasks.get(j.name, [])
        done = sum(1 for t in ts if t["state"] == "done")
        rows.append({**_summary(j), "state": st["state"] if st else _recorded(j),
                     "tasks_done": done, "tasks": len(ts)})
    return rows


def _list(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.records.layout import require_set_up

    layout = _layout(args)
    require_set_up(layout)
    rows = list_rows(layout)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no jobs yet: pilothouse job create NAME --request-file request.md")
        return 0
    print_table(["JOB", "STATE", "REV", "TASKS", "CREATED"],
                [[r["name"], r["state"], r["revision"], f"{r['tasks_done']}/{r['tasks']}" if r["tasks"] else "-",
                  r["created_at"][:16].replace("T", " ")] for r in rows])
    return 0


def _status(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.records.layout import require_set_up
    from pilothouse.providers.usage import tokens_text

    layout = _layout(args)
    require_set_up(layout)
    out = status_rows(layout, args.name)
    if args.json:
        emit_json(out[0] if args.name else out)
        return 0
    if not out:
        print("no jobs yet: pilothouse job create NAME --request-file request.md")
        return 0
    # a job's state is what the supervisor last wrote: without one running, "running" is stale
    print(supervisor_line(out[0]["supervisor"]))
    for n, s in enumerate(out):
        if n:
            print()
        line = f"job {s['job']}: {s['state']} (revision {s['revision']}"
        if s["state"] != "not started":
            line += f", planned {s['planned_revision']}, {tokens_text(s['tokens'], s['usage'])}"
        line += ")"
        if s["reason"]:
            line += f" — {s['reason']}"
        print(line)
        if s["tasks"]:
            from pilothouse.core.queries.task_figures import duration_text

            print_table(["TASK", "STATE", "KIND", "TRY", "ELAPSED", "PROVIDER", "WHY / DOING"],
                        [[t["task"], t["state"], t["kind"], t["attempt"], duration_text(t["elapsed_s"]),
                          t["provider"] or "-", t["reason"] or t["activity"] or ""] for t in s["tasks"]])
        elif s["state"] == "not started":
            print(f"  not started: pilothouse job start {s['job']}")
        for p in s["problems"]:
            where = f"{p['task']}: " if p["task"] else ""
            print(f"  problem {p['code']} ({where}{p['kind']}): {p['summary']}  [{' | '.join(p['replies'])}]")
    return 0


def _require_rows(layout: Any, names: list[str], states: dict[str, Any]) -> None:
    """A job without a state row is "not started" only if the supervisor never took it up: the
    event log says which it did (one read of it, and only when some row is missing)."""
    if all(n in states for n in names):
        return
    from pilothouse.core.records import state_witness
    from pilothouse.core.state.store import StateDamaged

    taken, _ = state_witness.expected(layout)
    lost = [n for n in names if n not in states and n in taken]
    if lost:  # read again: a row written after the first read and evented before the log was read
        again = job_states(layout)[0]
        lost = [f"job {n}" for n in lost if n not in again]
    if lost:
        raise StateDamaged(state_witness.lost_line(layout, lost))


def status_rows(layout: Any, name: str | None = None) -> list[dict[str, Any]]:
    """The state of one job (or every job): its tasks, open problems and the supervisor; what
    `job status --json` prints and the MCP server's job_status returns.

    A task's attempt and elapsed time are read from the job's event log, as `replay` and `report`
    read them (core/queries/task_figures.py): the three say the same of one log. A task the log
    holds nothing of (a store whose log was lost) keeps the store's attempt, and no elapsed time."""
    import time

    from pilothouse.core.records import jobs

    selected = [jobs.load_job(layout, name)] if name else jobs.list_jobs(layout)
    states, tasks, problems = job_states(layout, with_problems=True)
    _require_rows(layout, [j.name for j in selected], states)
    sup = supervisor_info(layout)
    now = time.time()
    out = []
    for j in selected:
        st = states.get(j.name)
        figured = _log_figures(layout, j.name, now) if tasks.get(j.name) else {}
        out.append({"job": j.name, "revision": j.revision, "state": st["state"] if st else _recorded(j),
                    "planned_revision": st["planned_revision"] if st else 0,
                    "reason": st["reason"] if st else (j.finished().says() if j.finished() else None),
                    "tokens": st["tokens"] if st else 0,
                    "usage": st["usage"] if st else "measured",
                    "coordinator": (st and st["coordinator"]) or (
                        f"{j.coordinator.provider}/{j.coordinator.model or ''}".rstrip("/") if j.coordinator else None),
                    "tasks": [{**{k: t.get(k) for k in ("task", "state", "kind", "attempt", "review_round", "provider",
                                                        "branch", "merged_sha", "reason", "activity", "tokens", "usage")},
                               **_figures(figured.get(t["task"]), t)}
                              for t in tasks.get(j.name, [])],
                    "problems": problems.get(j.name, []), "supervisor": sup})
    return out


def _log_figures(layout: Any, job: str, now: float) -> dict[str, tuple[int, float | None]]:
    """Each task's (attempt, elapsed seconds) in the job's event log (task_figures.figures, as replay
    and the report read them); nothing without a log file to read (a store whose log was lost, or a
    FIFO or a folder in its place: `job status` reads the store, the commands that need the log say so)."""
    if not layout.events.is_file():
        return {}
    from pilothouse.core.queries.task_figures import figures
    from pilothouse.core.queries.timeline import fold_of

    return figures(fold_of(layout.events, job), now)


def _figures(figured: tuple[int, float | None] | None, row: dict[str, Any]) -> dict[str, Any]:
    """A task's attempt and elapsed seconds: the log's (task_figures), else the store's attempt."""
    if figured is None:
        return {"attempt": row.get("attempt"), "elapsed_s": None}
    return {"attempt": figured[0], "elapsed_s": figured[1]}
