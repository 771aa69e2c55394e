"""Each stop path for real: the bundled scenario runs as `pilothouse demo --follow` on the sim (real
git, real gates, a detached supervisor), stops with exit 3 where the operator must answer, the
test answers through the CLI like an operator would, and `job wait` finishes the job. The last
three hold work without failing it: a quota wait (no problem, no attempt used), a setup failure
shared by two tasks (the job is held), a job past its token budget."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

WAIT_S = "90"


class Demo:
    def __init__(self, root: Path, run_cli: Any) -> None:
        self.root = root
        self.run_cli = run_cli

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run_cli(*args, cwd=self.root, timeout=timeout)

    def start(self, scenario: str) -> subprocess.CompletedProcess[str]:
        return self.run_cli("demo", "--follow", "--dir", str(self.root), "--scenario", scenario, timeout=150)

    def wait(self) -> subprocess.CompletedProcess[str]:
        return self.cli("job", "wait", "demo", "--repo", str(self.root), "--timeout", WAIT_S)

    def problems(self, all_: bool = False) -> list[dict[str, Any]]:
        out = self.cli("problem", "list", "--json", *(["--all"] if all_ else []))
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def act(self, code: str, *reply: str) -> subprocess.CompletedProcess[str]:
        out = self.cli("problem", "act", code, *reply)
        assert out.returncode == 0, out.stderr
        return out

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        lines = (self.root / ".ai/runtime/events.jsonl").read_text().splitlines()
        evs = [json.loads(x) for x in lines if x.strip()]
        return [e for e in evs if type_ is None or e["type"] == type_]

    def tasks(self) -> dict[str, sqlite3.Row]:
        conn = sqlite3.connect(self.root / ".ai/runtime/state.db")
        conn.row_factory = sqlite3.Row
        try:
            return {r["task"]: r for r in conn.execute("SELECT * FROM tasks WHERE job='demo'")}
        finally:
            conn.close()

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(["git", *args], cwd=cwd or self.root, check=True, capture_output=True,
                              text=True).stdout.strip()


@pytest.fixture
def demo(tmp_path: Path, cli: Any) -> Iterator[Demo]:
    d = Demo(tmp_path / "scratch", cli)
    yield d
    if (d.root / ".ai").exists():
        d.cli("job", "stop", "--repo", str(d.root), timeout=30)


def _expect_waiting(out: subprocess.CompletedProcess[str], kind: str, d: Demo) -> dict[str, Any]:
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-2000:]
    open_ = d.problems()
    assert [p["kind"] for p in open_] == [kind], [(p["kind"], p["summary"]) for p in open_]
    code = open_[0]["code"]
    assert code in out.stdout  # `demo --follow` names each open problem's code and replies
    return open_[0]


def _accepted(d: Demo) -> None:
    out = d.wait()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert d.events("job.accepted")


def test_gate_fails_twice_then_retry_after_the_fix_merges(demo: Demo) -> None:
    p = _expect_waiting(demo.start("gate-fails-twice"), "gate_failed", demo)
    assert p["replies"] == ["retry", "skip", "hint", "plan"]
    assert "test_accents" in p["evidence"]["output_tail"]
    # automatic retry first: exactly one builder resume with the gate's output, then the stop
    builders = [e for e in demo.events("run.started") if e["data"]["role"] == "builder"]
    assert [e["data"]["mode"] for e in builders] == ["code", "resume"]
    failed = [e["data"]["counts"] for e in demo.events("gate.finished") if not e["data"]["passed"]]
    assert len(failed) == 2
    # the gate knows what it measured: pytest's JUnit report, the failing test among those collected
    assert all(c["source"] == "junit" and c["failed"] == 1 and c["collected"] > 1 for c in failed), failed
    # the operator fixes the cause in the task's worktree, then retries the stopped step (the gate)
    wt = Path(p["evidence"].get("worktree") or demo.tasks()["add-slugify"]["worktree"])
    (wt / "textkit/slugify.py").write_text(
        "import unicodedata\n\n\ndef slugify(text: str) -> str:\n"
        "    folded = unicodedata.normalize('NFKD', text).encode('ascii', 'ignore').decode('ascii')\n"
        "    return '-'.join(folded.lower().split())\n")
    # not committed: the retry commits it, so the gate judges and the merge takes the same tree
    out = demo.cli("task", "retry", "add-slugify")  # = problem act CODE retry
    assert out.returncode == 0 and p["code"] in out.stdout, out.stderr
    _accepted(demo)
    assert demo.tasks()["add-slugify"]["state"] == "done"
    assert p["evidence"]["worktree"] == demo.tasks()["add-slugify"]["worktree"]
    fix = demo.git("log", "-1", "--format=%s", "ph/demo/add-slugify")
    assert fix == f"Operator's fix for add-slugify (problem {p['code']})"
    assert "unicodedata" in demo.git("show", "pilothouse/integration/demo:textkit/slugify.py")
    # no builder ran again: the retry re-ran the gate only
    assert len([e for e in demo.events("run.started") if e["data"]["role"] == "builder"]) == 2
    answered = demo.events("problem.answered")[-1]["data"]
    assert answered["reply"] == "retry" and answered["who"].endswith("@cli") and answered["at"]


def test_review_rejects_three_times_then_hint_is_approved(demo: Demo) -> None:
    p = _expect_waiting(demo.start("review-rejects"), "review_rejected", demo)
    rounds = [e["data"]["round"] for e in demo.events("review.finished")]
    assert rounds == [1, 2, 3]
    refused = demo.cli("problem", "act", p["code"], "retry")
    assert refused.returncode == 2 and "hint, accept, skip, plan" in refused.stderr
    demo.act(p["code"], "hint", "keep short words lower case inside a title")
    _accepted(demo)
    builders = [e for e in demo.events("run.started") if e["data"]["role"] == "builder"]
    # one session: the first build, two finding rounds, then the hint — all resumes of it
    assert [e["data"]["mode"] for e in builders] == ["code", "resume", "resume", "resume"]
    assert demo.events("review.finished")[-1]["data"]["overall"] == "PASS"
    merged = demo.git("show", "pilothouse/integration/demo:textkit/titlecase.py")
    assert "SMALL" in merged


def test_accept_takes_the_reviewed_commit_after_its_checks(demo: Demo) -> None:
    p = _expect_waiting(demo.start("accept"), "review_rejected", demo)
    commit = demo.tasks()["add-wordcount"]["commit_sha"]
    demo.act(p["code"], "accept")
    _accepted(demo)
    t = demo.tasks()["add-wordcount"]
    assert t["commit_sha"] == commit  # the very commit the reviewer saw
    # its gate ran again after the answer, before the merge
    answered_seq = demo.events("problem.answered")[-1]["seq"]
    assert any(e["seq"] > answered_seq and e["task"] == "add-wordcount" and e["data"]["passed"]
               for e in demo.events("gate.finished"))
    assert len([e for e in demo.events("run.started") if e["data"]["role"] == "reviewer"]) == 3


def test_skip_cancels_the_task_and_its_dependents(demo: Demo) -> None:
    p = _expect_waiting(demo.start("skip"), "builder_blocked", demo)
    assert "python-slugify" in p["summary"]
    shown = demo.cli("problem", "show", p["code"], "--json")
    assert json.loads(shown.stdout)["skip_cancels"] == ["add-slugify", "export-slugify"]
    # the independent task merged meanwhile
    assert demo.tasks()["add-wordcount"]["state"] == "done"
    out = demo.act(p["code"], "skip")
    assert "cancels add-slugify, export-slugify" in out.stdout
    _accepted(demo)
    states = {t: r["state"] for t, r in demo.tasks().items()}
    assert states["add-wordcount"] == "done"
    assert states["add-slugify"] in ("skipped", "cancelled") and states["export-slugify"] in ("skipped", "cancelled")


def test_plan_replans_with_the_operators_words(demo: Demo) -> None:
    p = _expect_waiting(demo.start("replan"), "builder_blocked", demo)
    refused = demo.cli("problem", "act", p["code"], "plan")
    assert refused.returncode == 2 and "needs your words" in refused.stderr
    demo.act(p["code"], "plan", "use the standard library only, no new packages")
    _accepted(demo)
    states = {t: r["state"] for t, r in demo.tasks().items()}
    assert states == {"add-slugify": "cancelled", "add-slugify-stdlib": "done"}
    assigners = [e for e in demo.events("run.started") if e["data"]["role"] == "assigner"]
    assert len(assigners) == 2
    job = json.loads((demo.root / ".ai/jobs/demo.json").read_text())
    assert any("standard library only" in d["text"] for d in job["decisions"])


def _set_project(d: Demo, **changes: Any) -> None:
    path = d.root / ".ai/project.yaml"
    data = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_quota_wait_resumes_by_itself_with_no_attempt_used_and_no_problem(demo: Demo) -> None:
    out = demo.start("quota-wait")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert demo.problems(all_=True) == []
    blocked = [e for e in demo.events("quota.changed") if e["data"].get("blocked")]
    assert blocked and blocked[0]["data"]["window"] == "five_hour" and blocked[0]["data"]["resets_at"]
    lifted = [e for e in demo.events("quota.changed") if e["data"].get("blocked") is False]
    assert lifted and lifted[-1]["seq"] > blocked[0]["seq"]
    moves = [(e["data"]["from"], e["data"]["to"]) for e in demo.events("task.state") if e["task"] == "add-slugify"]
    assert ("running", "waiting") in moves and moves[-1] == ("merging", "done")
    t = demo.tasks()
    assert t["add-slugify"]["attempt"] == 1  # the wait gave its attempt back
    assert t["add-wordcount"]["state"] == "done"
    waited = next(e for e in demo.events("task.state") if e["task"] == "add-slugify" and e["data"]["to"] == "waiting")
    assert "usage limit" in waited["data"]["reason"]


def test_same_setup_failure_in_two_tasks_holds_the_job(demo: Demo) -> None:
    out = demo.start("setup-twice")
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-2000:]
    open_ = demo.problems()
    assert sorted(p["kind"] for p in open_) == ["setup_failed", "setup_failed"]
    assert open_[0]["evidence"]["fingerprint"] == open_[1]["evidence"]["fingerprint"]
    assert any(e["data"].get("holds_job") for e in demo.events("problem.opened"))
    stopped = {p["task"] for p in open_}
    held = ({"add-slugify", "add-wordcount", "add-titlecase"} - stopped).pop()
    # no builder ran at all: setup runs before the builder, and the held task never started
    assert not [e for e in demo.events("run.started") if e["data"]["role"] == "builder"]
    assert demo.tasks()[held]["state"] in ("ready", "planned")
    # the operator fixes the setup command, then retries one of the two
    _set_project(demo, setup=['python3 -c "import textkit"'])
    demo.act(open_[0]["code"], "retry")
    out = demo.wait()
    # one retry is enough: the sibling held for the same cause is retried with it (stops/holds.py)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert demo.problems() == []
    assert {r["state"] for r in demo.tasks().values()} == {"done"}
    closed = {e["data"]["code"]: e["data"]["outcome"] for e in demo.events("problem.closed")}
    assert closed[open_[1]["code"]] == f"retried with {open_[0]['code']}"
    assert closed[open_[0]["code"]] == f"back to ready; with it {open_[1]['task']}"


def test_budget_stops_new_launches_until_the_cap_is_raised(demo: Demo) -> None:
    out = demo.start("budget")
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-2000:]
    open_ = demo.problems()
    assert [p["kind"] for p in open_] == ["budget"] and open_[0]["task"] is None
    t = demo.tasks()
    assert t["add-slugify"]["state"] == "done" and t["add-wordcount"]["state"] == "done"  # work kept
    assert t["export-api"]["state"] in ("ready", "planned")  # nothing new launched
    assert not [e for e in demo.events("run.started") if e["task"] == "export-api"]
    exceeded = demo.events("budget.exceeded")
    assert exceeded and exceeded[0]["data"]["used_tokens"] > 8000 == exceeded[0]["data"]["cap"]
    refused = demo.cli("problem", "act", open_[0]["code"], "retry")
    assert refused.returncode == 2 and "budgets.job_tokens" in refused.stderr
    from pilothouse.core.records.layout import RepoLayout
    from support import Events

    seen = Events(RepoLayout(demo.root))
    _set_project(demo, budgets__job_tokens=200000)
    # no retry needed: the supervisor sees the raised cap, closes the problem and the job goes on
    closed = seen.wait(lambda e: e["type"] == "problem.closed" and e["data"]["code"] == open_[0]["code"])
    assert closed["data"]["outcome"] == "the budget was raised to 200000 tokens (budgets.job_tokens): the job goes on"
    out = demo.wait()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert demo.tasks()["export-api"]["state"] == "done"
    assert json.loads(demo.cli("problem", "list", "--json").stdout) == []


def _four_weakened(demo: Demo) -> list[dict[str, Any]]:
    out = demo.start("gate-weakened")
    open_: list[dict[str, Any]] = []
    for _ in range(5):  # the four stops come as their gates finish; the job waits once all four are in
        assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-2000:]
        open_ = demo.problems()
        if len(open_) == 4:
            break
        out = demo.wait()
    return open_


def test_weakened_gates_stop_each_task_and_honest_fixes_merge(demo: Demo) -> None:
    open_ = _four_weakened(demo)
    by_task = {p["task"]: p for p in open_}
    assert {p["kind"] for p in open_} == {"gate_weakened"} and len(by_task) == 4, [p["summary"] for p in open_]
    kinds = {t: {w["kind"] for w in p["evidence"]["weakened"]} for t, p in by_task.items()}
    # (a) a skip added to the failing test (after its automatic retry), and the count shows it
    assert kinds["add-title"] == {"skip_added", "more_skipped"}
    assert by_task["add-title"]["evidence"]["base_counts"]["collected"] == 2
    # (b) a test file the repository had, deleted: fewer tests than the same gate on the base
    assert kinds["add-squash"] == {"test_deleted", "fewer_tests"}
    # (c) assertions removed, though the path was declared: a declared path needs a stated reason
    assert kinds["doc-spaces"] == {"assertions_removed"}
    # (d) pytest's settings relaxed (and the deselected test is one fewer collected)
    assert kinds["add-words"] >= {"settings_changed"}
    assert "tests/test_spaces.py" in by_task["add-squash"]["summary"]
    assert by_task["add-title"]["replies"] == ["hint", "retry", "accept", "skip", "plan"]
    for p in open_:
        demo.act(p["code"], "hint", "make the gate pass by fixing the code; restore the tests and settings")
    _accepted(demo)
    assert all(t["state"] == "done" for t in demo.tasks().values())
    # nothing weakened reached the integration branch
    merged = "pilothouse/integration/demo"
    assert "skip" not in demo.git("show", f"{merged}:tests/test_title.py")
    assert demo.git("show", f"{merged}:tests/test_spaces.py").count("assertEqual") == 2
    assert "not hyphens" not in demo.git("show", f"{merged}:pyproject.toml")
    assert "return text.replace" in demo.git("show", f"{merged}:textkit/words.py")


def test_accepting_a_weakened_gate_is_the_operators_recorded_override(demo: Demo) -> None:
    by_task = {p["task"]: p for p in _four_weakened(demo)}
    demo.act(by_task["add-words"]["code"], "accept")
    for task in ("add-title", "add-squash", "doc-spaces"):
        demo.act(by_task[task]["code"], "hint", "fix the code; restore the tests")
    _accepted(demo)
    decided = [e["data"]["text"] for e in demo.events("job.decided")]
    assert len(decided) == 1 and "accepted the weakened tests of task add-words" in decided[0], decided
    assert by_task["add-words"]["code"] in decided[0]
    # what the operator accepted is merged as it was: the relaxed setting, its builder not run again
    assert "not hyphens" in demo.git("show", "pilothouse/integration/demo:pyproject.toml")


def test_writes_into_protected_paths_are_denied_in_the_sandbox_and_the_honest_work_merges(demo: Demo) -> None:
    out = demo.start("gate-protected")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    conn = sqlite3.connect(demo.root / ".ai/runtime/state.db")
    try:
        [verdict] = [json.loads(v) for (v,) in conn.execute(
            "SELECT verdict FROM runs WHERE job='demo' AND role='builder'")]
    finally:
        conn.close()
    # the tool write and the shell append both failed at the kernel, reported to the builder as denials
    assert verdict["tool_errors"]["permission_denied"] == 2, verdict
    merged = "pilothouse/integration/demo"
    assert "test_collapses_runs" in demo.git("show", f"{merged}:tests/test_spaces.py")
    assert "not_spaces" not in demo.git("show", f"{merged}:pyproject.toml")
    assert "PNG" in demo.git("show", f"{merged}:tests/test_initials.py")


# what the operator's holdout test says (data/demo/holdout/gate-holdout.yaml): none of it may reach a model
HOLDOUT_SECRETS = ("holdout-marker-7c1f", "test_hyphenated_words_kept_secret", "AcronymHiddenTest", "SOTAD")


def _files_with(roots: list[Path], words: tuple[str, ...]) -> list[str]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [f"{path}: {w}" for w in words if w.encode() in data]
    return found


def test_a_builder_cannot_read_the_holdout_sees_its_counts_only_and_an_honest_fix_merges(demo: Demo) -> None:
    from pilothouse.providers import paths

    p = _expect_waiting(demo.start("gate-holdout"), "gate_failed", demo)
    gates = [e["data"] for e in demo.events("gate.finished") if e["task"] == "add-acronym"]
    # the link it planted at the holdout path (after every read of it failed) stopped the first gate,
    # a reason its retry was given word for word
    assert gates[0]["reason"] == ("the work has its own tests/holdout: the holdout tests cannot be added "
                                  "(remove it from the task's branch)")
    retry = [e["run"] for e in demo.events("run.started") if e["data"]["mode"] == "resume"][0]
    assert gates[0]["reason"] in (demo.root / ".ai/runtime/runs" / f"{retry}.task.md").read_text()
    # without the link, its gamed code passes the visible tests and fails the holdout: counts only
    assert gates[1]["reason"] == ("gate 'fast': the holdout tests failed (1 failed, 0 errors, 3 passed, 0 skipped "
                                  "of 4); their output is kept from workers")
    assert "the holdout tests failed (1 failed" in p["summary"]
    demo.act(p["code"], "hint", "a hyphen separates words too: do what the task says")
    _accepted(demo)
    review = [e["run"] for e in demo.events("run.started") if e["data"]["role"] == "reviewer"][0]
    brief = (demo.root / ".ai/runtime/runs" / f"{review}.task.md").read_text()
    assert "holdout tests: 5 passed of 5" in brief, brief
    # each way the builder tried to read the tests failed in its sandbox: the read through its link
    # and the shell (by path, /proc, the main checkout's git) alike
    runs = paths.providers_dir() / "sim" / "runs"
    builder = [e["run"] for e in demo.events("run.started") if e["data"]["role"] == "builder"][0]
    said = (runs / builder / "state" / "conversation.json").read_text()
    assert f"cat: {demo.root}/tests/holdout/test_acronym_hidden.py: No such file or directory" in said
    assert f"cat: '/proc/*/root{demo.root}/tests/holdout/test_acronym_hidden.py': No such file or directory" in said
    assert "permission denied: tests/holdout/test_acronym_hidden.py is outside the workdir" in said
    # the operator's tests are nowhere a model or a worker reads: the prompts, the conversations, the
    # run logs, the problems, the events
    assert _files_with([demo.root / ".ai", runs, paths.state_dir()], HOLDOUT_SECRETS) == []
    assert not any(w in json.dumps(demo.problems(all_=True)) for w in HOLDOUT_SECRETS)
    merged = "pilothouse/integration/demo"
    assert "replace(\"-\", \" \")" in demo.git("show", f"{merged}:textkit/acronym.py")
    assert demo.git("ls-tree", "-r", "--name-only", merged, "tests") == "tests/__init__.py\ntests/test_acronym.py\ntests/test_spaces.py"
    assert demo.git("status", "--porcelain", "--ignored", "tests/holdout") == "!! tests/holdout/"  # kept, untracked
