"""Job token budgets: past budgets.job_tokens nothing new launches; retry needs a raised cap."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.stops import answering, budgets, problems
from pilothouse.providers.errors import UserError
from support import guard, project_layout

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
POLICY = 'gates: {fast: "true", full: "true"}\nbudgets: {job_tokens: 1000}\n'


@pytest.fixture
def layout(tmp_path: Path) -> RepoLayout:
    return project_layout(tmp_path, POLICY)


def test_a_job_with_nothing_run_has_used_no_tokens(layout: RepoLayout) -> None:
    store.connect(layout.state_db).close()  # the database is there, the job has no row in it yet
    assert budgets.job_tokens(layout, "never-ran") == 0
    assert budgets.budget_state(layout, "never-ran").over is False


def test_budget_over_cap_opens_one_problem_and_retry_needs_a_raised_cap(layout: RepoLayout) -> None:
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, tokens, started_at)"
                 " VALUES ('r1', 'j', 't', 'builder', 'sim', 'code', 'finished', 600, 'x')")
    conn.close()
    assert budgets.enforce(layout, "j") is None
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, tokens, started_at)"
                 " VALUES ('r2', 'j', 't', 'builder', 'sim', 'code', 'finished', 500, 'x')")
    conn.close()
    p = budgets.enforce(layout, "j", now=T0)
    assert p is not None and p.kind == "budget" and p.replies == ["retry"] and "1100" in p.summary
    assert budgets.enforce(layout, "j", now=T0).code == p.code
    with pytest.raises(UserError, match="raise it in"):
        answering.act(layout, p.code, "retry")
    layout.project_yaml.write_text(POLICY.replace("1000", "5000"))
    answering.act(layout, p.code, "retry")
    assert budgets.budget_state(layout, "j").over is False


def test_launch_hold_names_the_budget_and_the_setup_hold(layout: RepoLayout) -> None:
    from pilothouse.core.stops import holds

    assert holds.launch_hold(layout, "j", 1000) is None
    a = problems.open_problem(layout, "j", "a", "setup_failed", "x", {"command": "make", "output_tail": "boom"})
    b = problems.open_problem(layout, "j", "b", "setup_failed", "x", {"command": "make", "output_tail": "boom"})
    why = holds.launch_hold(layout, "j", 1000)
    assert why is not None and a.code in why and b.code in why and "retry" in why
    assert holds.launch_hold(layout, "j", 1000, setup=False) is None  # planning needs no setup
    answering.act(layout, a.code, "retry")
    assert holds.launch_hold(layout, "j", 1000) is None
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, tokens, started_at)"
                 " VALUES ('r1', 'j', 't', 'builder', 'sim', 'code', 'finished', 1500, 'x')")
    conn.close()
    why = holds.launch_hold(layout, "j", 1000)
    assert why is not None and "budget of 1000" in why
    assert holds.launch_hold(layout, "j", 1000, setup=False) == why  # nor tokens for a plan past the budget
    assert holds.launch_hold(layout, "j", None) is None


def _run(layout: RepoLayout, run_id: str, tokens: int, state: str = "finished") -> None:
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, tokens, started_at)"
                 " VALUES (?, 'j', 't', 'builder', 'sim', 'code', ?, ?, 'x')", (run_id, state, tokens))
    conn.close()


def _job_total(layout: RepoLayout, tokens: int) -> None:
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO jobs_state(job, state, tokens, created_at, updated_at) VALUES ('j', 'running', ?, 'x', 'x')"
                 " ON CONFLICT(job) DO UPDATE SET tokens = excluded.tokens", (tokens,))
    conn.close()


def test_budget_stops_the_job_at_exactly_its_cap(layout: RepoLayout) -> None:
    _run(layout, "r1", 999)
    state = budgets.budget_state(layout, "j")
    assert (state.used, state.cap, state.over) == (999, 1000, False)
    assert budgets.enforce(layout, "j", now=T0) is None
    _run(layout, "r2", 1)
    state = budgets.budget_state(layout, "j")
    assert (state.used, state.over) == (1000, True)
    assert state.reason == "job j: 1000 of 1000 tokens (budgets.job_tokens) — reached its budget"
    p = budgets.enforce(layout, "j", now=T0)
    assert p is not None and p.kind == "budget"
    assert p.summary == ("Job j has used 1000 tokens, past its budget of 1000 (budgets.job_tokens): nothing new "
                         "launches; the work so far is kept. Raise the cap in .ai/project.yaml, then retry.")


def test_a_cap_of_no_tokens_is_refused_by_the_project_and_an_explicit_one_holds_everything(tmp_path: Path) -> None:
    # the least budget is one token: a cap of 0 (or below) would read as no cap to a truthiness test,
    # so the project refuses it before any budget is judged
    for cap in (0, -5):
        layout = project_layout(tmp_path / str(cap), f'gates: {{fast: "true", full: "true"}}\nbudgets: {{job_tokens: {cap}}}\n')
        with pytest.raises(UserError) as exc:
            budgets.budget_state(layout, "j")
        assert "budgets.job_tokens" in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    one = project_layout(tmp_path / "one", 'gates: {fast: "true", full: "true"}\nbudgets: {job_tokens: 1}\n')
    assert budgets.budget_state(one, "j").over is False
    assert budgets.budget_state(one, "j", 0).over is True  # a caller's own cap of 0 is a cap: nothing may run
    _run(one, "r1", 1)
    assert budgets.budget_state(one, "j").over is True


def test_job_tokens_is_the_larger_of_the_running_total_and_the_runs_sum(layout: RepoLayout) -> None:
    assert budgets.job_tokens(layout, "j") == 0  # no state.db yet
    assert not layout.state_db.exists()  # and reading the budget does not create one
    store.connect(layout.state_db).close()
    assert budgets.job_tokens(layout, "j") == 0  # a store, but nothing recorded for the job
    _run(layout, "r1", 300)
    assert budgets.job_tokens(layout, "j") == 300
    _job_total(layout, 1200)  # the supervisor's running total, ahead of the runs' records
    assert budgets.job_tokens(layout, "j") == 1200
    assert budgets.budget_state(layout, "j").over is True
    _job_total(layout, 100)  # the runs' sum is ahead now
    assert budgets.job_tokens(layout, "j") == 300


@pytest.mark.parametrize("state", ["running", "adopted", "lost"])
def test_the_tokens_of_a_run_in_any_state_count_against_the_cap(layout: RepoLayout, state: str) -> None:
    # a run still going, adopted from an earlier supervisor, or lost with its worker spent them too
    _run(layout, "r1", 300)
    _run(layout, "r2", 200, state=state)
    assert budgets.job_tokens(layout, "j") == 500


def test_budget_state_without_a_cap_is_never_over(tmp_path: Path) -> None:
    lay = project_layout(tmp_path, 'gates: {fast: "true", full: "true"}\n')
    _run(lay, "r1", 10**9)
    state = budgets.budget_state(lay, "j")
    assert (state.cap, state.over) == (None, False)
    assert state.reason == "job j: 1000000000 tokens used, no budget set"
    assert state.as_dict() == {"job": "j", "used_tokens": 10**9, "usage": "measured", "cap": None, "over": False,
                               "reason": "job j: 1000000000 tokens used, no budget set"}
    assert budgets.enforce(lay, "j", now=T0) is None


def test_the_budget_exceeded_event_is_logged_once(layout: RepoLayout) -> None:
    import json

    def exceeded() -> list[tuple[str, dict]]:
        events = [json.loads(x) for x in layout.events.read_text().splitlines()]
        return [(e["job"], e["data"]) for e in events if e["type"] == "budget.exceeded"]

    _run(layout, "r1", 1500)
    first = budgets.enforce(layout, "j", now=T0)
    assert first is not None
    logged = [("j", {"job": "j", "used_tokens": 1500, "usage": "measured", "cap": 1000, "over": True, "code": first.code,
                     "reason": "job j: 1500 of 1000 tokens (budgets.job_tokens) — reached its budget"})]
    assert exceeded() == logged  # when the problem opens
    again = budgets.enforce(layout, "j", now=T0)
    assert again is not None and again.code == first.code
    assert exceeded() == logged  # not again


def _labelled_run(layout: RepoLayout, run_id: str, tokens: int, usage: str) -> None:
    import json

    verdict = {"verdict": "completed", "tokens": {"input": tokens, "output": 0, "reasoning": 0}, "usage": usage}
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, verdict, tokens, started_at)"
                 " VALUES (?, 'j', 't', 'builder', 'local', 'code', 'finished', ?, ?, 'x')",
                 (run_id, json.dumps(verdict), tokens))
    conn.close()


def test_the_budget_acts_on_estimated_tokens_and_says_they_are_an_estimate(layout: RepoLayout) -> None:
    _labelled_run(layout, "r1", 400, "measured")
    _labelled_run(layout, "r2", 700, "estimated")
    problem = budgets.enforce(layout, "j", cap=1000, now=T0)
    assert problem is not None and problem.kind == "budget"
    assert "used ~1100 tokens (estimated), past its budget of 1000" in problem.summary
    assert "estimate (the server reported no usage for some runs" in problem.summary
    assert problem.evidence["usage"] == "estimated"
    state = budgets.budget_state(layout, "j", 5000)
    assert state.reason == "job j: ~1100 of 5000 tokens (budgets.job_tokens, estimated) — within its budget"


def test_a_measured_budget_problem_does_not_call_its_count_an_estimate(layout: RepoLayout) -> None:
    _labelled_run(layout, "r1", 1500, "measured")
    problem = budgets.enforce(layout, "j", cap=1000, now=T0)
    assert problem is not None and "estimate" not in problem.summary and "used 1500 tokens," in problem.summary


def test_a_job_on_a_server_that_reports_no_usage_still_meets_its_budget(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    import yaml
    from pilothouse.core import demo

    bundled = (demo._data() / "scenarios" / "budget.yaml").read_text()
    scenario = tmp_path / "no-usage.yaml"
    scenario.write_text(bundled.replace("\nscripts:", "\nserver: {usage: omit_streamed}\nscripts:", 1))
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data["budgets"] = {"job_tokens": 500}  # the assigner's prompt alone is more, counted or not
    layout.project_yaml.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr
    conn = store.connect(layout.state_db, readonly=True)
    runs = [json.loads(r["verdict"]) for r in conn.execute("SELECT verdict FROM runs WHERE state = 'finished'")]
    open_ = [dict(r) for r in conn.execute("SELECT * FROM problems WHERE state = 'open'")]
    conn.close()
    assert runs and {v["usage"] for v in runs} == {"estimated"}
    assert [p["kind"] for p in open_] == ["budget"]
    assert "(estimated), past its budget of 500" in open_[0]["summary"]
    assert "pilothouse counted their text at 4 characters a token" in open_[0]["summary"]


SPENDS_ITS_BUDGET = """
name: spends-its-budget
description: one task whose builder passes the job's budget as it finishes; nothing is left to launch after it
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
        usage: {input: 300, output: 50}
  - match: {mode: code}
    turns:
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
        usage: {input: 4000, output: 500}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
        usage: {input: 100, output: 50}
"""


def test_the_budget_problem_of_a_job_that_is_accepted_is_closed(tmp_path: Path) -> None:
    """Past its budget as its last builder finished, the job still merges what it has and is
    accepted: its budget problem held launches that will never come, so it is closed with the job,
    not left open asking for a retry."""
    import subprocess
    import sys

    import yaml
    from pilothouse.core import demo

    scenario = tmp_path / "spends.yaml"
    scenario.write_text(SPENDS_ITS_BUDGET)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data["budgets"] = {"job_tokens": 2000}  # past it only once the builder has run
    layout.project_yaml.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    conn = store.connect(layout.state_db, readonly=True)
    job = conn.execute("SELECT state FROM jobs_state WHERE job = 'demo'").fetchone()
    budget = [dict(r) for r in conn.execute("SELECT * FROM problems WHERE kind = 'budget'")]
    conn.close()
    assert job["state"] == "accepted"
    assert [(p["job"], p["state"]) for p in budget] == [("demo", "closed")], budget
    events = [e for e in layout.events.read_text().splitlines() if budget[0]["code"] in e]
    assert any('"problem.closed"' in e and "the job was accepted: nothing is left to launch" in e for e in events), \
        events


def test_the_budget_problem_of_a_job_whose_every_task_is_skipped_is_closed(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml
    from pilothouse.core import demo

    scenario = tmp_path / "gives-up.yaml"
    scenario.write_text(SPENDS_ITS_BUDGET.replace('"status":"complete","files_changed":["one.txt"]',
                                                  '"status":"blocked","files_changed":[]'))
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data["budgets"] = {"job_tokens": 2000}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    loop = [sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root), "--once"]
    done = subprocess.run(loop, capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    stops = [p for p in problems.list_problems(layout, True, job="demo") if p.kind != "budget"]
    assert [p.task for p in stops] == ["one"], [p.summary for p in problems.list_problems(layout, True)]
    answering.act(layout, stops[0].code, "skip")
    done = subprocess.run(loop, capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    conn = store.connect(layout.state_db, readonly=True)
    job = conn.execute("SELECT state FROM jobs_state WHERE job = 'demo'").fetchone()
    budget = [dict(r) for r in conn.execute("SELECT * FROM problems WHERE kind = 'budget'")]
    conn.close()
    assert job["state"] == "failed"
    assert [(p["job"], p["state"]) for p in budget] == [("demo", "closed")], budget


@pytest.mark.parametrize("raised", [5000, None])
def test_a_raised_or_removed_cap_closes_the_budget_problem_when_the_supervisor_looks(layout: RepoLayout,
                                                                                     raised) -> None:
    """The operator raises budgets.job_tokens (or removes it): the next launch check closes the budget
    problem and the job goes on, without waiting for a retry."""
    import json

    from pilothouse.core.stops import holds

    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, tokens, started_at)"
                 " VALUES ('r1', 'j', 't', 'builder', 'sim', 'code', 'finished', 1100, 'x')")
    conn.close()
    assert holds.launch_hold(layout, "j", 1000, now=T0) is not None
    p = next(q for q in problems.list_problems(layout) if q.kind == "budget")
    assert holds.launch_hold(layout, "j", raised, now=T0) is None
    assert problems.get_problem(layout, p.code).state == "closed"
    closed = [json.loads(line) for line in layout.events.read_text().splitlines() if '"problem.closed"' in line]
    assert [e["data"]["code"] for e in closed] == [p.code]
    assert closed[0]["data"]["outcome"].endswith("(budgets.job_tokens): the job goes on")
    assert ("raised to 5000" in closed[0]["data"]["outcome"]) == (raised is not None)


def test_a_budget_problem_the_operator_answered_is_left_to_its_answer_when_the_cap_is_raised(layout: RepoLayout) -> None:
    """The operator raised the cap and answered retry: the launch check that sees the raised cap
    does not close the problem under the answer (the answer's own outcome is what closes it)."""
    from pilothouse.core.stops import holds

    _run(layout, "r1", 1100)
    assert holds.launch_hold(layout, "j", 1000, now=T0) is not None
    p = next(q for q in problems.list_problems(layout) if q.kind == "budget")
    layout.project_yaml.write_text(POLICY.replace("1000", "5000"))
    answering.act(layout, p.code, "retry")
    assert [r.code for r in problems.consume_replies(layout, now=T0)] == [p.code]  # the supervisor takes it
    assert holds.launch_hold(layout, "j", 5000, now=T0) is None
    assert budgets.lifted(layout, "j", 5000) == []
    assert problems.get_problem(layout, p.code).state == "answered"
    assert '"problem.closed"' not in layout.events.read_text()
