"""A whole job on the demo's scratch repository with every role on the real model (SmolLM2-135M on
llama.cpp's server). The model cannot follow the protocol: the job must stop with problems that name
what happened, accept nothing that did not change, and never loop."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from honesty import CAPABILITY, reason_findings, usage_kind
from modelserver import RealModel
from pilothouse.providers import paths

pytestmark = [pytest.mark.slow, pytest.mark.realmodel]

WAIT_S = "240"
MAX_RUNS = 12  # every run of a job that only ever stops: planning retries, a builder, its retries


class Job:
    """The operator's side of the demo job, through the CLI in the repository."""

    def __init__(self, root: Path, run_cli: Any) -> None:
        self.root = root
        self.run_cli = run_cli
        self.base = ""

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run_cli(*args, cwd=self.root, timeout=timeout)

    def wait(self) -> subprocess.CompletedProcess[str]:
        return self.cli("job", "wait", "demo", "--timeout", WAIT_S, timeout=float(WAIT_S) + 60)

    def problems(self, *extra: str) -> list[dict[str, Any]]:
        out = self.cli("problem", "list", "--json", *extra)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def shown(self, code: str) -> str:
        out = self.cli("problem", "show", code)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        evs = [json.loads(x) for x in (self.root / ".ai/runtime/events.jsonl").read_text().splitlines() if x.strip()]
        return [e for e in evs if type_ is None or e["type"] == type_]

    def verdicts(self) -> list[dict[str, Any]]:
        """Every finished run's verdict, as the dispatch wrote it next to its log."""
        out = []
        for e in self.events("run.finished"):
            path = paths.logs_dir() / e["data"]["provider"] / f"{e['run']}.verdict.json"
            out.append(json.loads(path.read_text()))
        return out

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def job(tmp_path: Path, cli: Any, realmodel: RealModel) -> Iterator[Job]:
    """The demo's repository and job, with the coordinator, the reviewer and every builder on the real model."""
    from pilothouse.core import demo

    layout = demo.prepare(tmp_path / "scratch")
    project = yaml.safe_load(layout.project_yaml.read_text())
    project.pop("sim_scenario", None)
    project["max_workers"] = 1
    project["model_policy"] = {"roles": {"coordinator": realmodel.provider, "reviewer": realmodel.provider},
                               "assignments": {"local": {"provider": realmodel.provider}},
                               "default_assignment": "local"}
    layout.project_yaml.write_text(yaml.safe_dump(project, sort_keys=False))
    j = Job(layout.root, cli)
    j.git("commit", "-qam", "every role on the local model")
    j.base = j.git("rev-parse", "HEAD")
    yield j
    if (layout.root / ".ai/runtime").exists():
        j.cli("job", "cancel", "demo", timeout=60)
        j.cli("job", "stop", timeout=60)


def _usage_findings(j: Job, rm: RealModel) -> list[str]:
    """Over the whole job: each run says how its usage was obtained; the runs' sum is the server's
    own count where measured; neither the runs nor the job's total show 0 where the server counted."""
    verdicts = j.verdicts()
    turns = [ex for ex in rm.exchanges() if ex.worker]
    served = sum(ex.prompt_tokens + ex.completion_tokens for ex in turns)
    ours = sum(sum(v["tokens"].values()) for v in verdicts)
    kinds = {usage_kind(v) for v in verdicts}
    said = f"{len(verdicts)} runs: {ours} tokens ({kinds}); the server counted {served} in {len(turns)} requests"
    out = []
    if None in kinds:
        out.append(f"a run's verdict does not say whether its usage is measured or estimated: {said}")
    elif kinds == {"measured"} and ours != served:
        out.append(f"measured usage differs from the server's: {said}")
    elif served and not ours:
        out.append(f"the job's runs show 0 tokens: {said}")
    status = json.loads(j.cli("job", "status", "demo", "--json").stdout)
    line = next(x for x in j.cli("job", "status", "demo").stdout.splitlines() if x.startswith("job demo:"))
    if served and not status["tokens"]:
        out.append(f"the job's total is 0 tokens ({line!r}); the server counted {served}")
    elif "estimated" in kinds and not (usage_kind(status) == "estimated" or "estimat" in line or "~" in line):
        out.append(f"the job's total does not say it is an estimate: {line!r}")
    return out


TASKS = """\
- id: add-slugify
  title: Add slugify
  description: Add slugify(text, sep="-") in textkit/slug.py with its unit tests in tests/test_slug.py.
  expected_paths: {read: [textkit/__init__.py], write: [textkit/slug.py, tests/test_slug.py]}
  acceptance: ["python -m pytest -q tests/test_slug.py passes"]
"""


def _define_by_hand(j: Job, tmp: Path) -> None:
    (tmp / "tasks.yaml").write_text(TASKS)
    defined = j.cli("task", "define", "--file", str(tmp / "tasks.yaml"), "--job", "demo")
    assert defined.returncode == 0, defined.stdout + defined.stderr
    ready = j.cli("job", "plan-ready", "demo")
    assert ready.returncode == 0, ready.stdout + ready.stderr


def _run_findings(j: Job) -> list[str]:
    out = []
    for v in j.verdicts():
        out += [f"run {v['run_id']} ({v['mode']}): {f}" for f in reason_findings(v, [])]
    return out


def _refused_before_any_run(j: Job, role: str, open_: list[dict[str, Any]]) -> bool:
    """The model policy kept the role from this model (its capability probe found what the role
    needs missing): no such run started, and an open problem names what the model lacks."""
    if any(e["data"].get("role") == role for e in j.events("run.started")):
        return False
    said = [p["summary"] for p in open_]
    assert any(CAPABILITY.search(s) for s in said), f"no {role} ran, and no problem says why: {said}"
    return True


def _judge(findings: list[str], open_: list[dict[str, Any]]) -> None:
    assert not findings, "\n".join([f"{len(findings)} finding(s); open problems "
                                    f"{[(p['kind'], p['summary']) for p in open_]}:", *findings])


def test_planning_on_the_real_model_stops_names_the_way_around_and_closes_when_defined_by_hand(
        job: Job, realmodel: RealModel, tmp_path: Path) -> None:
    started = job.cli("job", "start", timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    findings: list[str] = []
    for attempt in (1, 2):
        waited = job.wait()
        # the job waits for the operator: this model's plans are never valid
        assert waited.returncode == 3, waited.stdout[-3000:] + waited.stderr[-2000:]
        open_ = job.problems()
        if _refused_before_any_run(job, "assigner", open_):
            return
        assert [p["kind"] for p in open_] == ["plan_invalid"], [(p["kind"], p["summary"]) for p in open_]
        if attempt == 1:
            assert job.cli("problem", "act", open_[0]["code"], "retry").returncode == 0
    # planning failed again and again: the problem says the model may not follow the protocol, and
    # names the way around it
    text = job.shown(open_[0]["code"])
    if "task define" not in text or "plan-ready" not in text:
        findings.append(f"repeated plan_invalid does not name `task define` + `plan-ready`: {text.strip()[:700]}")
    runs = job.events("run.started")
    assert all(e["data"].get("role") == "assigner" for e in runs), runs
    assert 0 < len(runs) <= MAX_RUNS, len(runs)
    findings += _run_findings(job) + _usage_findings(job, realmodel)

    # the operator defines the graph by hand: what the problem waited for is resolved, so it closes
    _define_by_hand(job, tmp_path)
    still = [p for p in job.problems() if p["kind"] == "plan_invalid"]
    for _ in range(30):
        if not still:
            break
        time.sleep(1)
        still = [p for p in job.problems() if p["kind"] == "plan_invalid"]
    if still:
        findings.append(f"plan_invalid stays open after task define + plan-ready: {still[0]['summary']}")
    assert not job.events("job.accepted")
    _judge(findings, job.problems())


def _nothing_to_accept(j: Job, problems: list[dict[str, Any]]) -> list[str]:
    """A builder that committed nothing left nothing to accept, and nothing "resubmitted"."""
    out = []
    for p in problems:
        if not str(p.get("summary") or "").strip():
            out.append(f"problem {p['code']} ({p['kind']}) has no summary")
        branch = f"ph/demo/{p['task']}" if p.get("task") else None
        tip = j.git("rev-parse", branch) if branch and _has(j, branch) else j.base
        if tip != j.base:
            continue
        if "accept" in p["replies"]:
            out.append(f"{p['kind']} offers accept although {p.get('task')} changed nothing")
        if p["kind"] == "unchanged_resubmission":
            out.append(f"unchanged_resubmission of the base commit: {p['summary']}")
    return out


def test_builder_on_the_real_model_is_not_accepted_when_nothing_changed(job: Job, realmodel: RealModel,
                                                                        tmp_path: Path) -> None:
    _define_by_hand(job, tmp_path)
    started = job.cli("job", "start", timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    waited = job.wait()
    assert waited.returncode == 3, waited.stdout[-3000:] + waited.stderr[-2000:]
    first = job.problems()
    assert first, waited.stdout[-3000:]
    if _refused_before_any_run(job, "builder", first):
        return
    findings = _nothing_to_accept(job, first)

    # the operator's hint goes back to the builder; it still changes nothing
    hint = next((p for p in first if "hint" in p["replies"]), None)
    if hint is not None:
        acted = job.cli("problem", "act", hint["code"], "hint", "write textkit/slug.py with the write tool")
        assert acted.returncode == 0, acted.stderr
        waited = job.wait()
        assert waited.returncode in (1, 3), waited.stdout[-3000:] + waited.stderr[-2000:]
        findings += _nothing_to_accept(job, job.problems())

    assert not job.events("job.accepted")
    assert not job.git("log", "--merges", "--format=%H", "pilothouse/integration/demo"), "something merged"
    states = json.loads(job.cli("job", "status", "demo", "--json").stdout)
    assert all(t["state"] != "done" for t in states["tasks"]), states["tasks"]
    runs = job.events("run.started")
    assert 0 < len(runs) <= MAX_RUNS, [(e["data"].get("role"), e["data"].get("mode")) for e in runs]
    findings += _run_findings(job) + _usage_findings(job, realmodel)
    _judge(findings, job.problems())


def _has(j: Job, ref: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=j.root, capture_output=True).returncode == 0
