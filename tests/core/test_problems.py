"""Problems: codes, replies that fit, answers recorded and consumed, skip previews, setup holds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state import store
from pilothouse.core.state.events import EventTailer
from pilothouse.core.stops import answering, fingerprint, holds, problems
from pilothouse.providers.errors import UserError
from support import guard, until

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


@pytest.fixture
def layout(tmp_path: Path) -> RepoLayout:
    lay = RepoLayout(tmp_path)
    conn = store.connect(lay.state_db)
    graph = {"a": [], "b": ["a"], "c": ["b"], "d": [], "e": ["a", "d"], "f": ["c"]}
    for t, deps in graph.items():
        conn.execute("INSERT INTO tasks(job, task, state, kind, depends_on, updated_at) VALUES (?,?,?,?,?,?)",
                     ("j1", t, "done" if t == "f" else "planned", "SAFE_PARALLEL", json.dumps(deps), "x"))
    conn.close()
    return lay


def events(lay: RepoLayout, type_: str) -> list[dict]:
    return [e for e in EventTailer(lay.events).read_new() if e["type"] == type_]


def test_codes_are_six_unambiguous_letters(layout: RepoLayout) -> None:
    conn = store.connect(layout.state_db)
    codes = {problems.open_problem(layout, "j1", f"t{i}", "gate_failed", "x", now=T0, conn=conn).code
             for i in range(60)}
    conn.close()
    assert len(codes) == 60
    for c in codes:
        assert len(c) == 6 and c.isalpha() and c.isupper()
        assert not set(c) & set("ILOQBSZG01")


def test_open_is_evented_and_idempotent_per_task_and_kind(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "a", "gate_failed", "Gate fast failed twice.",
                              {"log": "/x.log", "output_tail": "E assert 1 == 2"}, now=T0)
    again = problems.open_problem(layout, "j1", "a", "gate_failed", "again", now=T0)
    assert again.code == p.code
    assert p.replies == ["retry", "skip", "hint", "plan"]
    opened = events(layout, "problem.opened")
    assert len(opened) == 1 and opened[0]["data"]["code"] == p.code and opened[0]["task"] == "a"
    listed = problems.list_problems(layout)
    assert [x.code for x in listed] == [p.code] and listed[0].evidence["log"] == "/x.log"


def test_reply_must_fit_the_problem(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "a", "setup_failed", "npm missing", now=T0)
    with pytest.raises(UserError, match="does not fit .*it takes: retry, skip"):
        answering.act(layout, p.code, "hint", "try harder")
    with pytest.raises(UserError, match="not a reply"):
        answering.act(layout, p.code, "yolo")
    with pytest.raises(UserError, match="takes no words"):
        answering.act(layout, p.code, "retry", "please")
    q = problems.open_problem(layout, "j1", "b", "review_rejected", "rejected 3 times", now=T0)
    with pytest.raises(UserError, match="needs your words"):
        answering.act(layout, q.code, "hint")
    with pytest.raises(UserError, match="no problem with code"):
        answering.act(layout, "AAAAAA", "retry")


def test_act_records_who_and_when_then_the_supervisor_consumes(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "b", "review_rejected", "rejected", now=T0)
    data = answering.act(layout, p.code.lower(), "HINT", "use a dict, not a list", who="ana@cockpit",
                        now=T0 + timedelta(minutes=5))
    assert data["who"] == "ana@cockpit" and data["words"] == "use a dict, not a list"
    answered = events(layout, "problem.answered")
    assert answered[-1]["data"]["reply"] == "hint" and answered[-1]["data"]["at"].startswith("2026-11-29T07:05")
    # a second answer before the supervisor took the first is refused
    with pytest.raises(UserError, match="already answered: hint .use a dict, not a list. by ana@cockpit"):
        answering.act(layout, p.code, "skip")
    assert problems.list_problems(layout)[0].pending["reply"] == "hint"
    # operators wrote only `replies`: the problem row is untouched until consumed
    conn = store.connect(layout.state_db)
    assert conn.execute("SELECT state FROM problems").fetchone()["state"] == "open"
    conn.close()
    got = problems.consume_replies(layout, now=T0 + timedelta(minutes=6))
    assert [(r.code, r.reply, r.words, r.who) for r in got] == [(p.code, "hint", "use a dict, not a list",
                                                                   "ana@cockpit")]
    # unclosed answers come back again (a crashed supervisor re-applies them)
    assert [r.code for r in problems.consume_replies(layout)] == [p.code]
    problems.close_problem(layout, p.code, "builder resumed with the hint")
    assert problems.consume_replies(layout) == []
    assert problems.list_problems(layout) == []
    closed = problems.list_problems(layout, open_only=False)[0]
    assert closed.state == "closed" and closed.answer == "hint" and closed.who == "ana@cockpit"
    assert events(layout, "problem.closed")[-1]["data"]["code"] == p.code
    with pytest.raises(UserError, match="already answered"):
        answering.act(layout, p.code, "hint", "again")


def test_skip_preview_lists_the_task_and_its_transitive_dependents(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "a", "gate_failed", "x", now=T0)
    # f is done already (cannot be cancelled); d does not depend on a
    assert problems.skip_preview(layout, p.code) == ["a", "b", "e", "c"]
    data = answering.act(layout, p.code, "skip")
    assert data["cancels"] == ["a", "b", "e", "c"]
    assert problems.consume_replies(layout)[0].cancels == ["a", "b", "e", "c"]


def test_same_setup_failure_in_two_tasks_holds_the_job_until_one_is_retried(layout: RepoLayout) -> None:
    tail_a = "Running setup in /tmp/wt/j1-a\nnpm ERR! code ENOENT\nnpm ERR! path /tmp/wt/j1-a/package.json\n"
    tail_b = "Running setup in /tmp/wt/j1-b\nnpm ERR! code ENOENT\nnpm ERR! path /tmp/wt/j1-b/package.json\n"
    a = problems.open_problem(layout, "j1", "a", "setup_failed", "setup failed",
                              {"command": "npm ci", "output_tail": tail_a}, now=T0)
    assert holds.job_hold(layout, "j1") == []
    other = problems.open_problem(layout, "j1", "d", "setup_failed", "setup failed",
                                  {"command": "npm ci", "output_tail": "npm ERR! network timeout"}, now=T0)
    assert holds.job_hold(layout, "j1") == []  # a different failure does not hold
    b = problems.open_problem(layout, "j1", "b", "setup_failed", "setup failed",
                              {"command": "npm ci", "output_tail": tail_b}, now=T0 + timedelta(seconds=1))
    assert holds.job_hold(layout, "j1") == sorted([a.code, b.code])
    assert events(layout, "problem.opened")[-1]["data"]["holds_job"] == sorted([a.code, b.code])
    assert holds.job_hold(layout, "j2") == []
    answering.act(layout, b.code, "retry", now=T0 + timedelta(minutes=1))
    assert holds.job_hold(layout, "j1") == []
    # the retry did not fix it: failing alike again holds the job again
    problems.consume_replies(layout)
    problems.close_problem(layout, b.code, "retried")
    b2 = problems.open_problem(layout, "j1", "b", "setup_failed", "setup failed",
                               {"command": "npm ci", "output_tail": tail_b}, now=T0 + timedelta(minutes=2))
    assert holds.job_hold(layout, "j1") == sorted([a.code, b2.code])
    assert other.code not in holds.job_hold(layout, "j1")


def test_fingerprint_ignores_paths_durations_and_counts() -> None:
    f = fingerprint.setup_fingerprint
    assert f("make", "failed in 1.2s at /a/b\n3 errors") == f("make", "failed in 0.4s at /c/d\n5 errors")
    assert f("make", "no rule to make target") != f("make", "permission denied")
    assert f("make", "x") != f("npm ci", "x")


def test_same_setup_failure_lists_the_siblings_to_retry_together(layout: RepoLayout) -> None:
    ev = {"command": "npm ci", "output_tail": "npm ERR! missing /x/y"}
    a = problems.open_problem(layout, "j1", "a", "setup_failed", "x", ev, now=T0)
    b = problems.open_problem(layout, "j1", "b", "setup_failed", "x", {**ev, "output_tail": "npm ERR! missing /z"},
                              now=T0)
    problems.open_problem(layout, "j1", "d", "setup_failed", "x", {**ev, "output_tail": "other"}, now=T0)
    assert holds.same_setup_failure(layout, a.code) == [b.code]
    g = problems.open_problem(layout, "j1", "c", "gate_failed", "x", now=T0)
    assert holds.same_setup_failure(layout, g.code) == []


def test_a_summary_a_worker_wrote_reaches_a_terminal_without_its_escape_sequences(git_repo: Path) -> None:
    """On a terminal every command's output passes through one filter: a blocked reason that carries
    a title-setting OSC, a screen clear and a bell is shown as its text only."""
    import os
    import pty
    import subprocess
    import sys

    lay = RepoLayout(git_repo)
    store.connect(lay.state_db).close()
    problems.open_problem(lay, "j1", "a", "builder_blocked",
                          "the builder is blocked: \x1b]0;pwned\x07\x1b[2Jwhich API?\x07", replies=["hint", "skip"])
    primary, secondary = pty.openpty()
    proc = subprocess.run([sys.executable, "-m", "pilothouse", "problem", "list", "--repo", str(git_repo)],
                          stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.PIPE, timeout=guard(60))
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child's side is closed and everything was read
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert proc.returncode == 0, proc.stderr
    text = out.decode()
    assert "the builder is blocked: which API?" in text
    assert "\x1b" not in text and "\x07" not in text


def test_only_a_skip_cancels_tasks(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "a", "gate_failed", "x", now=T0)
    data = answering.act(layout, p.code, "retry")
    assert "cancels" not in data and "cancels" not in events(layout, "problem.answered")[-1]["data"]
    assert problems.consume_replies(layout)[0].cancels == []


def test_closing_is_once_and_an_unanswered_problem_can_go_away(layout: RepoLayout) -> None:
    p = problems.open_problem(layout, "j1", "a", "gate_failed", "x", now=T0)
    problems.close_problem(layout, p.code, "the gate passed on its own", now=T0 + timedelta(minutes=1))
    closed = problems.get_problem(layout, p.code)
    assert closed.state == "closed" and closed.closed_at == "2026-11-29T07:01:00.000Z"
    problems.close_problem(layout, p.code, "again", now=T0 + timedelta(minutes=2))
    assert problems.get_problem(layout, p.code).closed_at == "2026-11-29T07:01:00.000Z"
    assert [e["data"]["outcome"] for e in events(layout, "problem.closed")] == ["the gate passed on its own"]
    problems.close_problem(layout, "NOSUCH", "gone")  # an unknown code is nothing to close
    assert len(events(layout, "problem.closed")) == 1


def test_listing_a_repository_without_a_store_creates_none(tmp_path: Path) -> None:
    lay = RepoLayout(tmp_path)
    assert problems.list_problems(lay) == [] and not lay.state_db.exists()


@pytest.mark.parametrize(("used", "cap", "refused"), [(999, 1000, False), (1000, 1000, True), (1500, 1000, True)])
def test_a_budget_retry_needs_the_cap_above_what_the_job_used(layout: RepoLayout, used: int, cap: int,
                                                               refused: bool) -> None:
    layout.ai.mkdir(parents=True, exist_ok=True)
    layout.project_yaml.write_text(f'gates: {{fast: "true", full: "true"}}\nbudgets: {{job_tokens: {cap}}}\n')
    p = problems.open_problem(layout, "j1", "a", "budget", "over budget", {"used_tokens": used}, now=T0)
    if refused:
        with pytest.raises(UserError, match=f"has used {used} tokens and budgets.job_tokens is still {cap}: raise it"):
            answering.act(layout, p.code, "retry")
        assert problems.get_problem(layout, p.code).pending is None
    else:
        assert answering.act(layout, p.code, "retry")["reply"] == "retry"


def test_only_a_setup_failure_gets_a_fingerprint(layout: RepoLayout) -> None:
    ev = {"command": "git worktree add", "output_tail": "fatal: disk full"}
    p = problems.open_problem(layout, "j1", "a", "worktree_failed", "x", ev, now=T0)
    assert problems.get_problem(layout, p.code).evidence == ev


def test_a_budget_retry_without_a_recorded_use_is_not_refused(layout: RepoLayout) -> None:
    layout.ai.mkdir(parents=True, exist_ok=True)
    layout.project_yaml.write_text('gates: {fast: "true", full: "true"}\nbudgets: {job_tokens: 1}\n')
    p = problems.open_problem(layout, "j1", "a", "budget", "over budget", now=T0)
    assert answering.act(layout, p.code, "retry")["reply"] == "retry"


def test_a_closed_setup_problem_no_longer_holds_the_job(layout: RepoLayout) -> None:
    ev = {"command": "npm ci", "output_tail": "npm ERR! missing /x"}
    a = problems.open_problem(layout, "j1", "a", "setup_failed", "x", ev, now=T0)
    b = problems.open_problem(layout, "j1", "b", "setup_failed", "x", ev, now=T0)
    assert holds.job_hold(layout, "j1") == sorted([a.code, b.code])
    answering.act(layout, b.code, "skip")
    problems.consume_replies(layout)
    problems.close_problem(layout, b.code, "skipped")
    assert holds.job_hold(layout, "j1") == []


def test_a_retry_after_the_newest_failure_releases_every_sibling(layout: RepoLayout) -> None:
    ev = {"command": "npm ci", "output_tail": "npm ERR! missing /x"}
    codes = [problems.open_problem(layout, "j1", t, "setup_failed", "x", ev, now=T0).code for t in ("a", "b", "d")]
    assert holds.job_hold(layout, "j1") == sorted(codes)
    answering.act(layout, codes[2], "retry", now=T0 + timedelta(minutes=1))
    assert holds.job_hold(layout, "j1") == []  # the others failed before the retry: they wait for its outcome


def _flock_waiters(path: Path) -> int:
    """How many processes wait on a flock of `path` now (the "->" lines of /proc/locks)."""
    ino = path.stat().st_ino
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if line.split()[1] == "->" and line.split()[6].endswith(f":{ino}"))


@pytest.mark.parametrize("trial", range(3))
def test_four_operators_answering_at_once_record_exactly_one_answer(layout: RepoLayout, trial: int) -> None:
    import fcntl
    import subprocess
    import sys

    subprocess.run(["git", "init", "-q", str(layout.root)], check=True)
    p = problems.open_problem(layout, "j1", "b", "review_rejected", "rejected", now=T0)
    answers = [("accept",), ("skip",), ("hint", "use a dict"), ("plan", "split it")]
    # every process passes its first look (open, nothing waiting) and then waits on the log's lock,
    # so all four race for the write: the case where two were both told "recorded"
    with open(layout.events.with_name("events.jsonl.lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        procs = [subprocess.Popen([sys.executable, "-m", "pilothouse", "problem", "act", p.code, *a,
                                   "--who", f"op{i}@cli", "--repo", str(layout.root)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i, a in enumerate(answers)]

        def all_waiting() -> bool:
            assert all(pr.poll() is None for pr in procs), [pr.communicate() for pr in procs]
            return _flock_waiters(Path(lock.name)) >= len(procs)

        until(all_waiting, "the four answers reached the log's lock")
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    outs = [(pr.wait(timeout=guard(120)), *pr.communicate()) for pr in procs]
    winners = [i for i, (rc, _, _) in enumerate(outs) if rc == 0]
    assert len(winners) == 1, outs
    won = answers[winners[0]][0]
    for i, (rc, out, err) in enumerate(outs):
        if i != winners[0]:
            lines = err.strip().splitlines()
            assert rc != 0 and len(lines) == 1, (rc, out, err)
            assert f"already answered: {won}" in lines[0] and f"op{winners[0]}@cli" in lines[0]
            assert "not recorded" in lines[0] and "Traceback" not in err
    answered = events(layout, "problem.answered")
    assert [(e["data"]["reply"], e["data"]["who"]) for e in answered] == [(won, f"op{winners[0]}@cli")]
    conn = store.connect(layout.state_db)
    assert [r["reply"] for r in conn.execute("SELECT reply FROM replies")] == [won]
    conn.close()
