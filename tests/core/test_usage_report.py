"""`pilothouse usage`: where a job's tokens went, by role and by task, and every run by provider,
read from a real demo job on the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def demo_repo(tmp_path: Path, cli) -> Path:
    dest = tmp_path / "demo"
    r = cli("demo", "--follow", "--dir", str(dest), timeout=900)  # a guard against a hang, not a goal
    assert r.returncode == 0, r.stdout + r.stderr
    return dest


def _json(cli, repo: Path, *args: str) -> dict:
    r = cli("usage", *args, "--json", cwd=repo)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_jobs_tokens_by_role_add_up_to_every_run_say_their_share_and_bad_groupings_are_one_line(cli, demo_repo: Path) -> None:
    by_role = _json(cli, demo_repo, "demo")
    roles = {r["role"]: r for r in by_role["rows"]}
    # the demo plans once, builds three tasks (one continued after a hint) and reviews each
    assert {"planner", "builders", "resumes", "reviewers"} <= set(roles), roles
    assert roles["planner"]["runs"] == 1 and roles["resumes"]["runs"] >= 1
    assert all(r["usage"] in ("measured", "estimated", "unknown") for r in by_role["rows"])
    assert abs(sum(r["share"] for r in by_role["rows"]) - 1) < 0.01
    by_task = _json(cli, demo_repo, "demo", "--by", "task")
    by_provider = _json(cli, demo_repo)
    assert by_role["tokens"] == by_task["tokens"] == by_provider["tokens"] > 0
    text = cli("usage", "demo", cwd=demo_repo).stdout
    assert text.splitlines()[0].split() == ["ROLE", "RUNS", "TOKENS", "SHARE", "COST"]
    assert "planner" in text and "%" in text
    # a grouping that does not fit is one line naming the fix
    for args, said in ((("--by", "role"), "needs a job"), (("demo", "--by", "provider"), "drop JOB"),
                       (("no-such-job",), "no job named 'no-such-job'")):
        r = cli("usage", *args, cwd=demo_repo)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_every_cost_usage_shows_of_the_simulators_runs_says_so(git_repo: Path, cli) -> None:
    from pilothouse.core.records import jobs
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.state import store

    assert cli("init", "--gate-fast", "true", "--no-prove", cwd=git_repo).returncode == 0
    jobs.create_job(RepoLayout(git_repo), "j", "do it")
    conn = store.connect(RepoLayout(git_repo).state_db)
    now = "2026-11-29T07:00:00.000Z"
    for run, task, role, provider, cost in (("r1", None, "assigner", "sim", 0.0), ("r2", "a", "builder", "sim", 0.0),
                                            ("r3", "b", "builder", "claude", 0.5), ("r4", "b", "reviewer", "sim", 0.0)):
        conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, attempt, state, verdict, tokens,"
                     " cost_usd, started_at) VALUES (?, 'j', ?, ?, ?, 'code', 1, 'finished', ?, 100, ?, ?)",
                     (run, task, role, provider, json.dumps({"usage": "measured"}), cost, now))
    conn.close()
    costs = {}
    for args in (("j",), ("j", "--by", "task"), ()):
        table = cli("usage", *args, cwd=git_repo).stdout.splitlines()[2:]
        costs.update({line.split()[0]: line.split("  ")[-1].strip() for line in table})
    assert costs == {"planner": "$0.0000 (simulator)", "builders": "$0.5000 (measured, part simulator)",
                     "reviewers": "$0.0000 (simulator)", "(job)": "$0.0000 (simulator)", "a": "$0.0000 (simulator)",
                     "b": "$0.5000 (measured, part simulator)", "claude": "$0.5000 (measured)",
                     "sim": "$0.0000 (simulator)"}
    rows = _json(cli, git_repo, "j", "--by", "task")["rows"]
    assert [(r["task"], r["cost_label"]) for r in rows] == [("(job)", "simulator"), ("a", "simulator"),
                                                            ("b", "measured, part simulator")]
