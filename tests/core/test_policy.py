"""Model policy: pinned roles, assignments, complexity and mode limits, approved fallbacks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import load_project
from pilothouse.core.stops import policy, quota
from pilothouse.providers.errors import UserError
from support import guard, project_layout

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)

POLICY = """
gates: {fast: "true", full: "true"}
model_policy:
  roles: {coordinator: sol/gpt-sol, reviewer: opus}
  default_assignment: main
  assignments:
    main: {provider: sol, model: gpt-sol, fallbacks: [backup]}
    backup: {provider: opus, model: claude-opus}
    cheap: {provider: sonnet, complexity: [easy]}
    local: {provider: qwen, modes: [explore, code], complexity: [standard, complex]}
budgets: {job_tokens: 1000}
"""


@pytest.fixture
def layout(tmp_path: Path) -> RepoLayout:
    return project_layout(tmp_path, POLICY)


def _blocked(*provs: str) -> dict[str, quota.Availability]:
    return {p: quota.Availability(False, f"{p} five_hour limit reached", T0 + timedelta(hours=1)) for p in provs}


def test_default_assignment_first(layout: RepoLayout) -> None:
    c = policy.choose_worker(load_project(layout), {"id": "t1", "complexity": "standard"}, {})
    provider, model, why = c
    assert (provider, model) == ("sol", "gpt-sol") and "default" in why


def test_implicit_choice_moves_down_the_list_and_respects_complexity(layout: RepoLayout) -> None:
    proj = load_project(layout)
    c = policy.choose_worker(proj, {"id": "t1", "complexity": "complex"}, _blocked("sol", "opus"))
    assert c.provider == "qwen"  # sonnet takes easy tasks only
    assert [x["provider"] for x in c.considered] == ["sol", "opus", "sonnet"]
    c = policy.choose_worker(proj, {"id": "t1", "complexity": "easy"}, _blocked("sol", "opus"))
    assert c.provider == "sonnet"
    c = policy.choose_worker(proj, {"id": "t1", "complexity": "standard"}, _blocked("sol", "opus"), mode="review")
    assert c.provider is None and c.waiting and c.next_check_at == T0 + timedelta(hours=1)


def test_explicit_assignment_switches_only_to_approved_fallbacks_for_usage_limits(layout: RepoLayout) -> None:
    proj = load_project(layout)
    task = {"id": "t2", "complexity": "standard", "model_assignment": "main"}
    c = policy.choose_worker(proj, task, _blocked("sol"))
    assert c.provider == "opus" and c.fallback and "approved fallback" in c.why
    c = policy.choose_worker(proj, task, _blocked("sol", "opus"))
    assert c.provider is None and c.waiting  # never to an unapproved provider
    with pytest.raises(UserError, match="takes only easy"):
        policy.choose_worker(proj, {"id": "t3", "complexity": "complex", "model_assignment": "cheap"}, {})
    with pytest.raises(UserError, match="model_assignment 'nope'"):
        policy.choose_worker(proj, {"id": "t3", "model_assignment": "nope"}, {})


def test_a_task_stays_with_the_provider_that_holds_its_session(layout: RepoLayout) -> None:
    proj = load_project(layout)
    c = policy.choose_worker(proj, {"id": "t1"}, {}, current=("opus", "claude-opus"))
    assert c.provider == "opus"
    c = policy.choose_worker(proj, {"id": "t1"}, _blocked("opus"), current=("opus", "claude-opus"))
    assert c.provider is None and c.waiting


def test_coordinator_pin_never_changes(layout: RepoLayout) -> None:
    proj = load_project(layout)
    assert policy.coordinator_pin(proj) == "sol/gpt-sol"
    # the project's pin changed after the job pinned opus: the job keeps its pin, and waits for it
    c = policy.role_choice(proj, "coordinator", _blocked("opus"), pinned="opus/claude-opus")
    assert c.provider is None and c.waiting and "pinned" in c.why
    assert policy.role_choice(proj, "reviewer", {}).provider == "opus"


def test_models_cli_shows_policy_and_availability(git_repo: Path, cli) -> None:
    import json

    (git_repo / ".ai").mkdir()
    (git_repo / ".ai/project.yaml").write_text(POLICY)
    now = datetime.now(UTC)  # the CLI reads availability at the real time
    quota.record_quota(RepoLayout(git_repo), "opus", "weekly", 100, now + timedelta(days=3), "rate_limit_event",
                       now)
    out = cli("models", "--json", cwd=git_repo)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["roles"] == {"coordinator": "sol/gpt-sol", "reviewer": "opus"}
    assert rep["assignments"]["main"]["fallbacks"] == ["backup"]
    assert rep["availability"]["sol"]["available"] and not rep["availability"]["opus"]["available"]
    text = cli("models", cwd=git_repo).stdout
    assert "main*" in text and "weekly" in text and "easy" in text


# --- a model the capability probe found lacking takes no role that needs it (real sim, real job) --

AUTO_DROPPED = """
name: auto-dropped
description: the probe's tool call comes back only when forced; everything else works
scripts:
  - match: {contains: ["pilothouse capability probe: tool call (forced)"]}
    turns:
      - actions:
          - read: {path: README.md}
  - match: {contains: ["pilothouse capability probe: tool call (auto)"]}
    turns:
      - say: I would read README.md now.
  - match: {contains: ["pilothouse capability probe: result block"]}
    turns:
      - say: '<!--RESULT-->{"probe": "ok"}<!--/RESULT-->'
  - turns:
      - say: OK
"""
NO_PROTOCOL = """
name: no-protocol
description: streams and calls tools, but never ends with a result block
scripts:
  - match: {contains: ["pilothouse capability probe: tool call"]}
    turns:
      - actions:
          - read: {path: README.md}
  - turns:
      - say: OK
"""
ONE_TASK = """
name: one-task
description: plan one task, write one.txt
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
"""


def _sim_job(tmp_path: Path, cli, probe_scenario: str) -> RepoLayout:
    import subprocess
    import sys

    import yaml
    from pilothouse.core import demo

    (tmp_path / "probe.yaml").write_text(probe_scenario)
    checked = cli("providers", "check", "sim", "--scenario", str(tmp_path / "probe.yaml"), cwd=tmp_path)
    assert "sim: streaming=yes" in checked.stdout, checked.stdout + checked.stderr
    (tmp_path / "job.yaml").write_text(ONE_TASK)
    layout = demo.prepare(tmp_path / "repo", str(tmp_path / "job.yaml"))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(120))
    assert done.returncode == 0, done.stderr
    return layout


def test_a_model_without_tool_calls_on_auto_is_given_no_builder_and_the_problem_says_why(tmp_path: Path, cli) -> None:
    from pilothouse.core.stops import answering, problems

    layout = _sim_job(tmp_path, cli, AUTO_DROPPED)
    [p] = problems.list_problems(layout, True, job="demo")
    # its own kind, not a failed set-up: the capability it lacks, and where to find a model that has it
    assert (p.task, p.kind) == ("one", "model_unfit"), (p.kind, p.summary)
    assert "sim/sim-1 lacks tool calls with tool_choice auto (capability probe of " in p.summary
    assert p.replies == ["retry", "skip"] and "tool_choice auto" in p.evidence["gaps"][0]
    assert "which builders need; probe another with `pilothouse providers check NAME`" in p.summary
    # the way out: a model that passes the probe (here: the sim probed with its own scenario), then retry
    assert cli("providers", "check", "sim", cwd=tmp_path).returncode == 0
    answering.act(layout, p.code, "retry")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root), "--once"],
                   capture_output=True, text=True, timeout=guard(120), check=True)
    assert problems.list_problems(layout, True, job="demo") == []


def test_a_model_that_ignores_the_result_block_protocol_is_no_coordinator(tmp_path: Path, cli) -> None:
    from pilothouse.core.stops import problems

    layout = _sim_job(tmp_path, cli, NO_PROTOCOL)
    [p] = problems.list_problems(layout, True, job="demo")
    assert (p.task, p.kind) == (None, "model_unfit"), (p.kind, p.summary)
    assert p.summary.startswith("the coordinator cannot be sim (")
    assert "sim/sim-1 lacks the result-block protocol (capability probe of " in p.summary
    assert "which assigners need" in p.summary
