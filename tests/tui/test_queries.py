"""core/queries/work.py: read-only views of state.db, and which rows a batch of events invalidates."""

from __future__ import annotations

from pilothouse.core.queries.work import Queries, affected, depth
from pilothouse.core.records.layout import RepoLayout


def test_queries_read_the_fixture(cockpit_repo) -> None:
    q = Queries(cockpit_repo)
    jobs = {j.job: j for j in q.jobs()}
    assert jobs["first-draft"].done == 1 and jobs["first-draft"].total == 5
    assert jobs["hello-world"].final and not jobs["first-draft"].final
    tasks = q.tasks("first-draft")
    order = [t.task for t in tasks]
    assert order.index("calendar-store") < order.index("calendar-api") < order.index("calendar-docs")
    assert depth(tasks)["calendar-docs"] == 2
    assert q.task("first-draft", "calendar-api").worker == "sim/sim-coder"
    assert [p.code for p in q.problems()] == ["KTRWMB"]
    assert q.problem("KTRWMB").replies == ["retry", "accept", "skip", "hint"]
    providers = {p.provider: p for p in q.providers()}
    assert not providers["sim-b"].available(None) and providers["sim"].available(None)
    assert providers["sim"].next_check_at == "2026-11-29T07:35:00.000Z"  # the earliest of its windows' checks
    assert providers["sim-b"].next_check_at == "2026-11-29T08:10:00.000Z"
    assert [r.role for r in q.runs("first-draft", "calendar-store")] == ["builder", "reviewer"]
    assert q.supervisor().stopped_at == "2026-11-29T07:29:30.000Z"
    q.close()


def test_the_connection_is_read_only(cockpit_repo) -> None:
    q = Queries(cockpit_repo)
    try:
        q.conn.execute("DELETE FROM jobs_state")
    except Exception as exc:  # noqa: BLE001
        assert "readonly" in str(exc)
    else:
        raise AssertionError("a view could write")
    assert len(q.jobs()) == 2


def test_no_store_yet_answers_empty_then_opens(tmp_path, cockpit_repo) -> None:
    q = Queries(RepoLayout(tmp_path / "fresh"))
    assert q.jobs() == [] and q.problems() == [] and q.supervisor() is None and q.conn is None


def test_a_job_written_but_not_yet_supervised_shows_as_new(cockpit_repo) -> None:
    cockpit_repo.jobs_dir.mkdir(parents=True, exist_ok=True)
    (cockpit_repo.jobs_dir / "week-view.json").write_text(
        '{"name": "week-view", "created_at": "2026-11-29T07:29:00.000Z", '
        '"revisions": [{"revision": 1, "request": "x", "at": "2026-11-29T07:29:00.000Z"}]}')
    (cockpit_repo.jobs_dir / "broken.json").write_text("{")
    q = Queries(cockpit_repo)
    assert [j.job for j in q.jobs()][-1] == "week-view"
    assert q.job("week-view").state == "new"
    assert q.job("broken") is None


def test_affected_names_only_what_changed() -> None:
    ch = affected([
        {"type": "task.state", "job": "j", "task": "a", "run": "r1", "data": {}},
        {"type": "run.activity", "job": "j", "task": "b", "run": "r2", "data": {}},
        {"type": "supervisor.heartbeat", "data": {}},
    ])
    assert ch.jobs == {"j"} and ch.tasks == {("j", "a"), ("j", "b")} and ch.runs == {"r1", "r2"}
    assert ch.supervisor and not ch.problems and not ch.providers and not ch.task_lists
    assert affected([{"type": "problem.answered", "job": "j", "data": {}}]).problems
    assert affected([{"type": "quota.changed", "data": {}}]).providers
    assert affected([{"type": "job.revised", "job": "j"}]).task_lists == {"j"}
    assert not affected([{"type": "something.new"}])



def test_a_closed_problem_reads_its_reply_and_waiting_answers_come_in_one_query(cockpit_repo) -> None:
    """The cockpit reads problems as core does: the answer is the reply, not its stored JSON."""
    from pilothouse.core.stops import answering
    from pilothouse.core.stops import problems as core_problems
    answering.act(cockpit_repo, "KTRWMB", "retry", who="someone@cli")
    q = Queries(cockpit_repo)
    assert [(c, r.reply) for c, r in q.waiting_answers().items()] == [("KTRWMB", "retry")]
    [taken] = core_problems.consume_replies(cockpit_repo)  # what the supervisor does, then closes it
    core_problems.close_problem(cockpit_repo, taken.problem.code, "back to gating")
    assert q.waiting_answers() == {}
    assert (q.problem("KTRWMB").state, q.problem("KTRWMB").answer) == ("closed", "retry")


def test_job_and_task_rows_carry_the_usage_label_of_their_runs(cockpit_repo) -> None:
    import json
    import sqlite3

    conn = sqlite3.connect(cockpit_repo.state_db)
    row = conn.execute("SELECT run_id, job, task FROM runs WHERE job = 'first-draft' AND state = 'finished' "
                       "AND task = 'calendar-store' LIMIT 1").fetchone()
    assert row is not None
    verdict = json.dumps({"verdict": "completed", "usage": "unknown", "tokens": None})
    conn.execute("UPDATE runs SET verdict = ? WHERE run_id = ?", (verdict, row[0]))
    conn.commit()
    conn.close()
    q = Queries(cockpit_repo)
    assert q.job("first-draft").usage == "unknown" and q.job("hello-world").usage == "measured"
    assert q.task("first-draft", "calendar-store").usage == "unknown"
    assert {r.run_id: r.usage for r in q.runs("first-draft", "calendar-store")}[row[0]] == "unknown"
    q.close()
