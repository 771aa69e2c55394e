"""A task's attempts and elapsed time (core/queries/task_figures.py): `job status`, `replay` and the report
read them from one event log through one function, and say the same of it, for a task resumed after a
failed gate, one that waited for a usage limit and for the operator, one on its second attempt, and
one still building."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from support import write_log

OPEN = {"code": "QWERTY", "kind": "gate_failed", "summary": "the fast gate failed"}


def _builder(run: str, mode: str, attempt: int | None) -> dict[str, Any]:
    data: dict[str, Any] = {"role": "builder", "mode": mode, "provider": "sim", "model": None}
    if attempt is not None:
        data["attempt"] = attempt
    return {"run": run, "data": data}


def _state(task: str, frm: str | None, to: str, **data: Any) -> dict[str, Any]:
    return {"task": task, "data": {"from": frm, "to": to, "reason": f"{frm} -> {to}", **data}}


def _finished(task: str, run: str) -> dict[str, Any]:
    return {"task": task, "run": run, "data": {"verdict": "completed", "tokens": 10, "usage": "measured",
                                               "cost_usd": 0.0}}


def _story(t0: float) -> list[tuple[float | str, str, dict[str, Any]]]:
    """The job's log: (seconds after t0, type, fields), as the supervisor writes them."""
    at = lambda s: t0 + s  # noqa: E731
    lines: list[tuple[float | str, str, dict[str, Any]]] = [(at(0), "job.created", {"data": {"revision": 1}})]
    for task in "abcd":
        lines += [(at(2.1), "task.state", _state(task, None, "planned")), (at(2.2), "task.state",
                                                                           _state(task, "planned", "ready"))]
    lines += [
        # a: built, its gate failed, the same builder resumed (one attempt), gated, reviewed, merged
        (at(3.0), "task.state", _state("a", "ready", "running")),
        (at(3.01), "run.started", {"task": "a", **_builder("ra1", "code", 1)}),
        (at(10.0), "run.finished", _finished("a", "ra1")),
        (at(10.0), "task.state", _state("a", "running", "gating")),
        (at(12.0), "gate.finished", {"task": "a", "data": {"level": "fast", "passed": False}}),
        (at(12.0), "task.state", _state("a", "gating", "running")),
        (at(12.01), "run.started", {"task": "a", **_builder("ra2", "resume", 1)}),
        # b: a usage limit (a log from before the event said the attempt given back), built again
        (at(3.0), "task.state", _state("b", "ready", "running")),
        (at(3.02), "run.started", {"task": "b", **_builder("rb1", "code", None)}),
        (at(5.0), "task.state", _state("b", "running", "waiting")),
        # c: a usage limit (the event says the attempt it is on), a crash, a fresh second attempt
        (at(4.0), "task.state", _state("c", "ready", "running")),
        (at(4.01), "run.started", {"task": "c", **_builder("rc1", "code", 1)}),
        (at(6.0), "task.state", _state("c", "running", "waiting", attempt=0)),
        (at(8.0), "task.state", _state("b", "waiting", "running")),
        (at(8.01), "run.started", {"task": "b", **_builder("rb2", "code", None)}),
        (at(9.0), "task.state", _state("c", "waiting", "running")),
        (at(9.01), "run.started", {"task": "c", **_builder("rc2", "code", 1)}),
        (at(10.5), "task.state", _state("c", "running", "ready")),
        (at(11.0), "task.state", _state("b", "running", "gating")),
        (at(11.0), "task.state", _state("c", "ready", "running")),
        (at(11.01), "run.started", {"task": "c", **_builder("rc3", "code", 2)}),
        # b's gate fails: it stops on a problem the operator answers 8.5 s later; the builder resumes
        (at(12.0), "task.state", _state("b", "gating", "stopped")),
        (at(12.0), "problem.opened", {"task": "b", "data": OPEN}),
        (at(15.0), "run.finished", _finished("a", "ra2")),
        (at(15.0), "task.state", _state("a", "running", "gating")),
        (at(16.0), "task.state", _state("a", "gating", "reviewing")),
        (at(16.0), "task.state", _state("c", "running", "stopped")),  # c waits for the operator, unanswered
        (at(18.0), "task.state", _state("a", "reviewing", "approved")),
        (at(18.5), "task.state", _state("a", "approved", "merging")),
        (at(19.0), "task.state", _state("a", "merging", "done")),
        (at(20.0), "problem.answered", {"task": "b", "data": {"code": "QWERTY", "reply": "retry", "who": "op@cli"}}),
        (at(20.5), "problem.closed", {"task": "b", "data": {"code": "QWERTY", "outcome": "retried"}}),
        (at(20.5), "task.state", _state("b", "stopped", "running")),
        (at(20.51), "run.started", {"task": "b", **_builder("rb3", "resume", None)}),
        (at(24.0), "task.state", _state("b", "running", "gating")),
        (at(25.0), "task.state", _state("b", "gating", "approved")),
        (at(26.0), "task.state", _state("b", "approved", "merging")),
        (at(27.0), "task.state", _state("b", "merging", "done")),
        # d: still building when the log ends (a run's usage line is its last line)
        (at(26.0), "task.state", _state("d", "ready", "running")),
        (at(26.01), "run.started", {"task": "d", **_builder("rd1", "code", 1)}),
        (at(28.0), "run.usage", {"task": "d", "run": "rd1", "data": {"tokens": {"input": 5}}}),
    ]
    return sorted(lines, key=lambda line: line[0])  # the log is written in time order


# attempt, and elapsed seconds at the log's end (d: 28.0 - 26.01, still running)
WANT = {"a": (1, 15.99),               # 3.01 → 19.0: the resume is the same attempt
        "b": (1, 10.49),               # 8.01 → 27.0 less the 8.5 s its problem was open (12.0 → 20.5)
        "c": (2, 4.99),                # its second attempt 11.01 → 16.0, when it stopped
        "d": (1, 1.99)}


def _repo(cli: Any, repo: Path, t0: float) -> Path:
    """`repo` set up with job j, a store whose rows know its four tasks (their `attempt` columns 0, as
    `maintain repair` leaves them), and the job's log."""
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.state import store

    assert cli("init", "--gate-fast", "true", "--no-prove", cwd=repo).returncode == 0
    (repo / "req.md").write_text("do a thing\n")
    assert cli("job", "create", "j", "--request-file", "req.md", cwd=repo).returncode == 0
    layout = RepoLayout(repo)
    conn = store.connect(layout.state_db)
    now = "2026-11-29T07:00:00.000Z"
    conn.execute("INSERT INTO jobs_state(job, state, revision, planned_revision, created_at, updated_at) "
                 "VALUES ('j', 'running', 1, 1, ?, ?)", (now, now))
    for task, state in (("a", "done"), ("b", "done"), ("c", "stopped"), ("d", "running")):
        conn.execute("INSERT INTO tasks(job, task, state, kind, updated_at) VALUES ('j', ?, ?, 'SAFE_PARALLEL', ?)",
                     (task, state, now))
    conn.close()
    write_log(layout.events, _story(t0))
    return layout.events


def _json(cli: Any, repo: Path, *args: str) -> Any:
    r = cli(*args, "--json", cwd=repo)
    assert r.returncode == 0 and not r.stderr, r.stderr
    return json.loads(r.stdout)


def test_job_status_replay_and_the_report_give_each_task_the_same_attempts_and_elapsed_time(
        cli: Any, git_repo: Path) -> None:
    t0 = round(time.time() - 7200)  # two hours ago: d has been "running" since, for `job status` (now)
    _repo(cli, git_repo, t0)
    report = {t["task"]: (t["attempts"], t["elapsed_s"]) for t in _json(cli, git_repo, "report", "j")["tasks"]}
    replay = {t["task"]: (t["attempts"], t["elapsed_s"])
              for t in _json(cli, git_repo, "replay", "j", "--at", "end")["tasks"]}
    status = {t["task"]: (t["attempt"], t["elapsed_s"]) for t in _json(cli, git_repo, "job", "status", "j")["tasks"]}
    assert report == replay == WANT
    # the task still building counts to the moment each view is of: now, for `job status`
    assert {k: v for k, v in status.items() if k != "d"} == {k: v for k, v in WANT.items() if k != "d"}
    assert status["d"][0] == 1 and status["d"][1] > 7000
    # a moment inside the job: the fold up to it, through the same function
    earlier = {t["task"]: (t["attempts"], t["elapsed_s"])
               for t in _json(cli, git_repo, "replay", "j", "--at", "+14s")["tasks"]}
    assert earlier == {"a": (1, 10.99), "b": (1, 3.99), "c": (2, 2.99), "d": (0, None)}  # b: stopped at 12.0
    # and in words: the same figures in each view's text
    md = cli("report", "j", "--md", cwd=git_repo).stdout
    assert "| b | done | merging -> done | 1 | 10.5s |" in md and "| c | stopped | running -> stopped | 2 | 5.0s |" in md
    text = cli("replay", "j", cwd=git_repo).stdout
    assert "  b  done       attempts 1  elapsed 10.5s" in text
    table = cli("job", "status", "j", cwd=git_repo).stdout
    assert [line.split()[:5] for line in table.splitlines() if line.startswith(("a ", "b ", "c "))] == [
        ["a", "done", "SAFE_PARALLEL", "1", "16.0s"], ["b", "done", "SAFE_PARALLEL", "1", "10.5s"],
        ["c", "stopped", "SAFE_PARALLEL", "2", "5.0s"]]


def test_job_status_of_a_task_the_log_holds_nothing_of_keeps_the_stores_attempt(cli: Any, git_repo: Path) -> None:
    events = _repo(cli, git_repo, round(time.time() - 60))
    events.unlink()  # a store whose log was lost
    status = _json(cli, git_repo, "job", "status", "j")
    assert [(t["task"], t["attempt"], t["elapsed_s"]) for t in status["tasks"]] == [
        ("a", 0, None), ("b", 0, None), ("c", 0, None), ("d", 0, None)]
    table = cli("job", "status", "j", cwd=git_repo).stdout
    assert ["a", "done", "SAFE_PARALLEL", "0", "—"] in [line.split()[:5] for line in table.splitlines()]
