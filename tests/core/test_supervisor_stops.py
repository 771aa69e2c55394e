"""Stops that fit what happened: a builder that never left its base, planning that keeps failing,
and a gate that already fails on the base. Each runs a whole job on the sim with real git and
gates (the supervisor in the foreground until nothing moves without the operator)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import answering, problems
from support import guard

NOTHING = """
name: does-nothing
description: the builder says complete but never changes a file, also after a hint
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: resume}
    turns:
      - say: |
          Done now.
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _quick_project(layout: RepoLayout, **changes: object) -> None:
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    data.update(changes)
    layout.project_yaml.write_text(yaml.safe_dump(data))


def _once(layout: RepoLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr


def _job(tmp_path: Path, scenario_text: str, **project: object) -> RepoLayout:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(scenario_text)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick_project(layout, **project)
    return layout


def test_a_builder_that_never_left_its_base_is_no_change_after_a_hint_and_offers_no_accept(tmp_path: Path,
                                                                                           cli) -> None:
    layout = _job(tmp_path, NOTHING)
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    assert (p.task, p.kind) == ("one", "no_changes") and "accept" not in p.replies
    # the claim is named: complete, with one.txt, but the worktree has no change
    claim = "the result says complete (files_changed: one.txt), but the run made no change in the worktree"
    assert claim in p.summary, p.summary
    # the verdict's reason is in the run.finished event and in `why`
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    [finished] = [e for e in events if e["type"] == "run.finished" and e["task"] == "one"]
    assert (finished["data"]["verdict"], finished["data"]["reason"]) == ("empty", claim)
    why = cli("why", "one", cwd=layout.root)
    assert why.returncode == 0 and "builder empty" in why.stdout and claim in why.stdout, why.stdout
    answering.act(layout, p.code, "hint", "write one.txt this time")
    _once(layout)
    [again] = problems.list_problems(layout, True, job="demo")
    # before: `unchanged_resubmission` of the base commit, offering accept
    assert (again.task, again.kind) == ("one", "no_changes"), (again.kind, again.summary)
    assert "accept" not in again.replies


BAD_PLANS = """
name: bad-plans
description: the assigner never gives a valid plan; the builder writes one.txt
scripts:
  - match: {mode: plan}
    turns:
      - say: "Here is my plan: first do one, then two."
      - say: "The plan again: one and two."
  - match: {mode: code}
    turns:
      - say: Writing.
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


PLAN_AND_ENDPOINT_ERROR = """
name: plan-and-endpoint-error
description: one invalid plan, an endpoint error, one more invalid plan
scripts:
  - match: {mode: plan}
    turns:
      - say: "Here is my plan: first do one, then two."
      - error: {status: 503, message: "overloaded"}
      - say: "The plan again: one and two."
      - say: "And again: one and two."
"""


def test_an_endpoint_error_between_invalid_plans_is_not_counted_as_an_invalid_plan(tmp_path: Path, cli) -> None:
    layout = _job(tmp_path, PLAN_AND_ENDPOINT_ERROR)
    _once(layout)
    [first] = problems.list_problems(layout, True, job="demo")
    assert first.kind == "plan_invalid", first.summary
    assert "were invalid" not in first.summary, first.summary  # two invalid plans, not three


def test_repeated_invalid_plans_point_to_defining_tasks_by_hand_which_closes_the_problem(tmp_path: Path, cli) -> None:
    layout = _job(tmp_path, BAD_PLANS)
    _once(layout)
    [first] = problems.list_problems(layout, True, job="demo")
    assert first.kind == "plan_invalid" and "task define" not in first.summary
    answering.act(layout, first.code, "retry")
    _once(layout)
    [second] = problems.list_problems(layout, True, job="demo")
    assert second.kind == "plan_invalid" and second.code != first.code
    assert "3 plans were invalid: the model may be unable to follow the planning protocol" in second.summary
    assert "pilothouse task define --job demo --file FILE, then pilothouse job plan-ready demo" in second.summary

    # the way around it: the operator defines the tasks and marks the plan ready
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"tasks": [
        {"id": "one", "title": "One", "job_id": "demo", "expected_paths": {"write": ["one.txt"]}}]}))
    assert cli("task", "define", "--file", str(tmp_path / "tasks.yaml"), "--job", "demo",
               cwd=layout.root).returncode == 0
    r = cli("job", "plan-ready", "demo", cwd=layout.root)
    assert r.returncode == 0, r.stderr
    _once(layout)
    # before: the plan_invalid problem stayed open after the job was planned by hand
    assert problems.list_problems(layout, True, job="demo") == []
    closed = {p.code: p for p in problems.list_problems(layout, False, job="demo")}
    assert closed[second.code].state == "closed"
    merged = subprocess.run(["git", "show", "pilothouse/integration/demo:one.txt"], cwd=layout.root,
                            capture_output=True, text=True)
    assert merged.stdout == "one\n"


WRITES_ONE = """
name: writes-one
description: one task writes one.txt; after gate feedback the builder resubmits as it is
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: Writing.
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
      - say: |
          The failure is not in my change.
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_gate_that_fails_alike_on_the_base_says_the_repositorys_own_tests_fail(tmp_path: Path) -> None:
    layout = _job(tmp_path, WRITES_ONE)
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["gates"] = {"fast": "grep -q fixed status.txt", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    (layout.root / "status.txt").write_text("broken\n")
    for args in (["add", "-A"], ["commit", "-qm", "the base's own check fails"]):
        subprocess.run(["git", *args], cwd=layout.root, check=True, capture_output=True)
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    # before: the builder got the failure back, resubmitted, and the stop was unchanged_resubmission
    assert (p.task, p.kind) == ("one", "gate_failed"), (p.kind, p.summary)
    assert p.summary.startswith("The repository's own tests fail before the task: gate fast "
                                "`grep -q fixed status.txt` fails the same way on the base commit ")
    assert "Fix them on the base branch" in p.summary and len(p.evidence["base"]) == 10
    events = [e for e in (layout.events.read_text().splitlines()) if '"run.started"' in e]
    assert len(events) == 2  # the assigner and one builder: no builder round on the base's failure


ONE_TASK_BY_HAND = """
name: by-hand
description: the builder writes one.txt
scripts:
  - match: {mode: code}
    turns:
      - say: Writing.
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_job_whose_tasks_are_defined_by_hand_is_not_stopped_for_want_of_a_coordinator(tmp_path: Path,
                                                                                         cli) -> None:
    layout = _job(tmp_path, ONE_TASK_BY_HAND)
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.setdefault("model_policy", {}).setdefault("roles", {})["coordinator"] = "no-such-provider"
    layout.project_yaml.write_text(yaml.safe_dump(data))
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump({"tasks": [
        {"id": "one", "title": "One", "job_id": "demo", "expected_paths": {"write": ["one.txt"]}}]}))
    assert cli("task", "define", "--file", str(tmp_path / "tasks.yaml"), "--job", "demo",
               cwd=layout.root).returncode == 0
    _once(layout)  # a pass between `task define` and `job plan-ready`
    assert problems.list_problems(layout, True, job="demo") == []
    status = json.loads(cli("job", "status", "demo", "--json", cwd=layout.root).stdout)
    assert "job plan-ready demo" in json.dumps(status), status
    assert cli("job", "plan-ready", "demo", cwd=layout.root).returncode == 0
    _once(layout)
    assert problems.list_problems(layout, True, job="demo") == []
    events = [json.loads(line)["type"] for line in layout.events.read_text().splitlines()]
    assert "problem.opened" not in events


def _run_one(layout: RepoLayout) -> tuple[list[Any], str, list[str]]:
    """The job run until nothing moves without the operator: task one's builder runs (run id, mode,
    verdict), its state, and every task's counters as stored."""
    from pilothouse.core.state import store

    _once(layout)
    conn = store.connect(layout.state_db)
    try:
        builders = conn.execute("SELECT run_id, mode, verdict FROM runs WHERE task='one' AND role='builder' "
                                "ORDER BY rowid").fetchall()
        state = conn.execute("SELECT state FROM tasks WHERE task='one'").fetchone()["state"]
        counters = [r["counters"] or "" for r in conn.execute("SELECT counters FROM tasks")]
    finally:
        conn.close()
    return builders, state, counters


# a one-task job: the builder drafts one.txt, which the gate refuses; its resume's one turn is @RESUME@;
# a fresh builder whose task holds each of @ANSWERED@ writes it done
DRAFT_THEN = """
name: @NAME@
description: "@NAME@: the gate refuses the first draft, and the resume that was to answer it ends without a result"
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code, contains: [@ANSWERED@]}
    turns:
      - say: "Answering the gate."
        actions:
          - write: {path: one.txt, content: "done\\n"}
      - say: |
          Done.
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "A draft."
        actions:
          - write: {path: one.txt, content: "draft\\n"}
      - say: |
          Drafted.
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
      - @RESUME@
"""


def _draft_then(name: str, answered: list[str], resume_turn: str) -> str:
    return (DRAFT_THEN.replace("@NAME@", name).replace("@ANSWERED@", ", ".join(json.dumps(a) for a in answered))
            .replace("@RESUME@", resume_turn))


# the resume dies mid-stream each try
LOST_RESUME = _draft_then("lost-resume", ["ended without a result (its session is not continued)",
                                          "The gate `grep -qx done one.txt` failed"],
                          '{say: "never heard", fault: close_mid_stream}')


def test_a_fresh_builder_taking_a_lost_resumes_place_is_handed_what_the_resume_was_to_answer(tmp_path: Path) -> None:
    """A resume that ends without a result (here its model's stream dies; on a cluster its node is
    gone) is replaced by a fresh builder, which starts a new session: the gate output the resume was
    to answer goes into that builder's task, or it would never hear why its first draft failed."""
    from pilothouse.core.dispatch import runs

    layout = _job(tmp_path, LOST_RESUME, gates={"fast": "grep -qx done one.txt", "full": "grep -qx done one.txt"})
    builders, state, _ = _run_one(layout)
    assert [r["mode"] for r in builders] == ["code", "resume", "code"], [dict(r) for r in builders]
    assert json.loads(builders[1]["verdict"])["verdict"] == "error"
    fresh = runs.read_spec(layout, builders[2]["run_id"])
    assert fresh is not None
    assert "ended without a result (its session is not continued)" in fresh.task_text
    assert "The gate `grep -qx done one.txt` failed" in fresh.task_text
    assert state == "done"


CREDENTIAL_IN_GATE = LOST_RESUME.replace('"The gate `grep -qx done one.txt` failed"', '"The gate `echo"')


@pytest.mark.parametrize("printed", ["a configured key", "a credential-shaped fixture"])
def test_what_a_lost_resume_carries_to_the_fresh_builder_is_redacted_and_never_a_text_dispatch_refuses(
        tmp_path: Path, printed: str) -> None:
    """The gate prints a credential, so its words (the resume's task) are refused by dispatch: the
    resume ends without a result. A configured key is masked in what the fresh builder is handed, and
    that builder finishes the task; a credential-shaped string no key names would be refused again
    (the task would stop instead of recovering), so nothing is carried and the fresh builder runs."""
    from pilothouse.core.dispatch import runs
    from pilothouse.providers import keys

    secret = "sk-sim-" + "4e1d0b" * 6
    shown = secret if printed == "a configured key" else "AKIA" + "QX7R2M9TZK4W8PLB"
    keys.set_key("sim", secret, use_backend="file")
    gate = f"echo {shown}; grep -qx done one.txt"
    layout = _job(tmp_path, CREDENTIAL_IN_GATE, gates={"fast": gate, "full": gate})
    builders, state, counters = _run_one(layout)
    assert [r["mode"] for r in builders] == ["code", "resume", "code"], [dict(r) for r in builders]
    assert "contains" in json.loads(builders[1]["verdict"])["error"]  # dispatch refused the resume's text
    fresh = runs.read_spec(layout, builders[2]["run_id"])
    assert fresh is not None and shown not in fresh.task_text and not any(shown in (c or "") for c in counters)
    assert json.loads(builders[2]["verdict"])["verdict"] != "error"
    if printed == "a configured key":
        assert "ended without a result (its session is not continued)" in fresh.task_text
        assert state == "done"
    else:
        assert "ended without a result" not in fresh.task_text
        assert state != "done"  # it drafted again: the gate stops it, with the fresh builder having run


# the resume meets a usage limit: the builder after the wait is a fresh one
QUOTA_ON_RESUME = _draft_then("quota-on-resume", ["usage-limit wait", "ended without a result",
                                                  "The gate `grep -qx done one.txt` failed"],
                              "{error: {status: 429, retry_after_s: 1, window: five_hour, used_pct: 100}}")


def test_the_fresh_builder_after_a_resumes_usage_limit_wait_is_handed_what_the_resume_was_to_answer(
        tmp_path: Path) -> None:
    """A usage limit on a resume gives the attempt back and the task waits; the builder after the
    wait starts a new session, so it too is handed the gate output the resume was to answer."""
    from pilothouse.core.dispatch import runs

    layout = _job(tmp_path, QUOTA_ON_RESUME, gates={"fast": "grep -qx done one.txt", "full": "grep -qx done one.txt"})
    builders, state, _ = _run_one(layout)
    assert [r["mode"] for r in builders] == ["code", "resume", "code"], [dict(r) for r in builders]
    fresh = runs.read_spec(layout, builders[2]["run_id"])
    assert fresh is not None and "The gate `grep -qx done one.txt` failed" in fresh.task_text
    assert state == "done"
