"""Damaged runtime state: a store deleted under a running supervisor stops it with what to run;
a missing, corrupted or other-version store is one line; `pilothouse maintain repair` rebuilds
what the records and the event log hold (core/upkeep/repair.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventTailer
from pilothouse.core.supervisor import control as supervisor_ctl
from support import guard, until


def _demo(tmp_path: Path, review: str) -> RepoLayout:
    """The recovery demo, quick, with true gates: job `demo`, not started."""
    quick = tmp_path / "quick.yaml"
    bundled = Path(demo._data() / "scenarios" / "demo-recovery.yaml").read_text()
    quick.write_text(bundled.replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = review
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    return layout


def _accepted_demo(tmp_path: Path, cli) -> RepoLayout:
    layout = _demo(tmp_path, "off")
    assert cli("job", "start", "--repo", str(layout.root)).returncode == 0
    w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
    assert w.returncode == 0, w.stdout + w.stderr
    return layout


def _one_line(r, *words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_a_store_deleted_under_a_running_supervisor_stops_it_and_repair_brings_the_job_back(tmp_path: Path,
                                                                                         cli) -> None:
    layout = _accepted_demo(tmp_path, cli)
    before = json.loads(cli("job", "status", "demo", "--json", "--repo", str(layout.root)).stdout)
    usage_before = json.loads(cli("usage", "demo", "--json", "--repo", str(layout.root)).stdout)
    assert before["tokens"] > 0 and all(t["tokens"] > 0 for t in before["tasks"]), before
    try:
        for suffix in ("", "-wal", "-shm"):
            layout.state_db.with_name(layout.state_db.name + suffix).unlink(missing_ok=True)
        until(lambda: supervisor_ctl.status(layout) is None, "the supervisor stopped on its store's deletion",
              every=0.2)
    finally:
        supervisor_ctl.stop(layout)
    stopped = [e for e in EventTailer(layout.events).read_new() if e["type"] == "supervisor.stopped"]
    assert "was deleted while the supervisor ran" in stopped[-1]["data"]["error"]
    assert "pilothouse maintain repair" in layout.supervisor_log.read_text()
    # a fresh, empty store would forget the job: refused at once, saying what to run
    _one_line(cli("job", "start", "--repo", str(layout.root)), "state.db is missing", "maintain repair")
    r = cli("maintain", "repair", "--repo", str(layout.root))
    assert r.returncode == 0, r.stderr
    assert "rebuilt 1 job(s) (demo)" in r.stdout and "finished run(s) with their token counts" in r.stdout
    assert "not recovered: runs not finished" in r.stdout
    status = json.loads(cli("job", "status", "demo", "--json", "--repo", str(layout.root)).stdout)
    assert status["state"] == "accepted"
    assert all(t["state"] == "done" for t in status["tasks"])
    # the counts the event log holds come back with their labels: never a 0 that reads as measured
    assert (status["tokens"], status["usage"]) == (before["tokens"], before["usage"])
    assert [(t["task"], t["tokens"], t["usage"]) for t in status["tasks"]] == \
        [(t["task"], t["tokens"], t["usage"]) for t in before["tasks"]]
    assert json.loads(cli("usage", "demo", "--json", "--repo", str(layout.root)).stdout) == usage_before
    again = cli("maintain", "repair", "--repo", str(layout.root))
    _one_line(again, "nothing to repair")


def test_a_corrupted_or_other_version_store_is_one_line_and_repair_keeps_it_aside(git_repo: Path, cli) -> None:
    assert cli("init", "--gate-fast", "true", cwd=git_repo).returncode == 0
    (git_repo / "req.md").write_text("do a thing\n")
    assert cli("job", "create", "j1", "--request-file", "req.md", cwd=git_repo).returncode == 0
    layout = RepoLayout(git_repo)
    layout.runtime.mkdir(parents=True, exist_ok=True)
    layout.state_db.write_bytes(b"this is not sqlite at all" * 200)
    for argv in (("job", "start"), ("job", "status"), ("problem", "list")):
        _one_line(cli(*argv, cwd=git_repo), "state.db: not a usable state database", "maintain repair")
    assert not layout.supervisor_log.exists()  # nothing was started
    r = cli("maintain", "repair", cwd=git_repo)
    assert r.returncode == 0 and "the damaged store was kept as" in r.stdout, r.stderr
    kept = list(layout.runtime.glob("state.db.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not sqlite")
    conn = sqlite3.connect(layout.state_db)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema'")
    conn.commit()
    conn.close()
    _one_line(cli("job", "start", cwd=git_repo), "made by another pilothouse version", "'99'", "maintain repair")


def test_a_rebuilt_run_is_never_taken_as_the_answer_of_planning_or_the_combined_review(tmp_path: Path,
                                                                                      cli) -> None:
    """`maintain repair` rebuilds finished runs from the log with no result (core/dispatch/runs.py's
    NOT_REBUILT): the job's planning and its combined review each run again for real, instead of
    reading 'no plan' or 'no verdict' from a rebuilt row and stopping the job."""
    from pilothouse.core.state import store
    from pilothouse.core.upkeep.repair import _insert_run

    layout = _demo(tmp_path, "once")
    root = layout.root
    conn = store.connect(layout.state_db)
    with conn:
        for run_id, role, mode in (("rebuilt-plan", "assigner", "plan"), ("rebuilt-review", "reviewer", "review")):
            _insert_run(conn, run_id, {"job": "demo", "task": None, "role": role, "provider": "sim", "mode": mode,
                                       "attempt": 1, "started": "2026-01-01T00:00:00.000Z",
                                       "finished": "2026-01-01T00:01:00.000Z", "breakdown": None,
                                       "end": {"verdict": "ok", "parse_state": "parsed", "tokens": 10}},
                        "2026-01-01T00:01:00.000Z")
    conn.close()
    try:
        assert cli("job", "start", cwd=root).returncode == 0
        w = cli("job", "wait", "demo", cwd=root, timeout=120)
    finally:
        supervisor_ctl.stop(layout)
    assert w.returncode == 0, w.stdout + w.stderr
    status = json.loads(cli("job", "status", "demo", "--json", cwd=root).stdout)
    assert status["state"] == "accepted", status
    conn = store.connect(layout.state_db)
    roles = [(r[0], r[1]) for r in conn.execute(
        "SELECT role, run_id FROM runs WHERE task IS NULL ORDER BY started_at")]
    conn.close()
    assert roles[:2] == [("assigner", "rebuilt-plan"), ("reviewer", "rebuilt-review")]
    assert {role for role, _ in roles[2:]} == {"assigner", "reviewer"}  # each ran again, for real
    problems = [e for e in EventTailer(layout.events).read_new() if e["type"] == "problem.opened"]
    assert problems == [], problems


def test_a_rebuilt_combined_review_is_run_again_by_a_supervisor_that_finds_the_job_reviewing(
        tmp_path: Path) -> None:
    """A store rebuilt while the combined review ran: the job is `reviewing` and its one reviewer run
    is the rebuilt row. The step launches the review again rather than read the rebuilt row's empty
    result as a failed review."""
    from pilothouse.core.supervisor import review
    from pilothouse.core.supervisor.loop import Supervisor
    from pilothouse.core.upkeep.repair import _insert_run

    layout = _demo(tmp_path, "once")
    sup = Supervisor(layout)
    try:
        sup.store.ensure_job("demo", 1)
        sup.store.set_job("demo", None, reason="the combined change is being reviewed", state="reviewing")
        with sup.conn:
            _insert_run(sup.conn, "rebuilt-review", {
                "job": "demo", "task": None, "role": "reviewer", "provider": "sim", "mode": "review", "attempt": 1,
                "started": "2026-01-01T00:00:00.000Z", "finished": "2026-01-01T00:01:00.000Z", "breakdown": None,
                "end": {"verdict": "ok", "parse_state": "parsed", "tokens": 10}}, "2026-01-01T00:01:00.000Z")
        review._combined_review_step(sup, "demo")
        assert sup.store.job("demo")["state"] == "reviewing"  # not blocked on the rebuilt row
        again = [r["run_id"] for r in sup.conn.execute(
            "SELECT run_id FROM runs WHERE role='reviewer' AND run_id != 'rebuilt-review'")]
        assert len(again) == 1 and again[0] in sup.live_runs()
        assert sup.children[again[0]].wait(timeout=guard(120)) == 0
    finally:
        for child in sup.children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
        sup.conn.close()
