"""explore, code and plan dispatches on a real model: SmolLM2-135M-Instruct behind llama.cpp's
server, which streams without usage and drops the tools it is sent. The model mostly fails the
protocol; each verdict must still say honestly what happened and what it cost."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from honesty import (
    CAPABILITY,
    CUT_OFF,
    NO_TOOLS,
    PLACEHOLDER,
    changed_files,
    explore_findings,
    reason_findings,
    reason_of,
    run_exchanges,
    usage_findings,
    usage_kind,
)
from modelserver import ALIAS, RealModel, write_provider
from pilothouse.providers import paths

pytestmark = [pytest.mark.slow, pytest.mark.realmodel]

STEP_CAP = 6


def _dispatch(cli: Any, rm: RealModel, repo: Path, tmp_path: Path, mode: str, task: str) -> tuple[dict[str, Any], list]:
    """One dispatch; its verdict and the model turns the server saw for it."""
    marker = f"ticket {mode}-{rm.provider}"  # the same each time: the same prompt, the same answer
    task_file = tmp_path / f"{mode}.md"
    task_file.write_text(f"{task}\n\n({marker})\n")
    run_id = f"{mode}-{rm.provider}"
    r = cli("dispatch", "--provider", rm.provider, "--mode", mode, "--workdir", str(repo), "--task-file",
            str(task_file), "--run-id", run_id, "--step-cap", str(STEP_CAP), "--timeout", "240",
            "--idle-timeout", "150", timeout=300)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert [o["type"] for o in out] == ["pilothouse.started", "pilothouse.verdict"], r.stdout
    v = out[1]
    assert v["run_id"] == run_id and v["provider"] == rm.provider
    turns = run_exchanges(rm.exchanges(), marker)
    # nothing loops: every model turn is one request the server saw, and they stop at the cap
    assert v["steps"] == len(turns) <= STEP_CAP, (v["steps"], len(turns))
    assert all(ex.status == 200 for ex in turns), [(ex.status, ex.text[:200]) for ex in turns]
    return v, turns


def _findings(v: dict[str, Any], turns: list, repo: Path) -> list[str]:
    """Everything dishonest about one verdict, all at once (so a failure lists each finding)."""
    if not turns:
        # refused before the model was asked (a capability it lacks): the verdict says which
        reason = reason_of(v)
        if v["verdict"] == "error" and CAPABILITY.search(reason):
            return []
        return [f"no request reached the model, and the verdict does not say why: {v['verdict']} {reason!r}"]
    out = usage_findings(v, turns) + reason_findings(v, turns)
    if not any(ex.tool_calls for ex in turns) and not changed_files(repo) and v["verdict"] == "partial":
        out.append(f"no tool ran and nothing changed, yet the verdict is partial ({v['parse_state']})")
    done = [line for line in (paths.logs_dir() / "latest.log").read_text().splitlines()
            if f"/{v['run_id']} " in line and (" DONE " in line or " FAILED " in line)]
    assert len(done) == 1, done
    if re.search(r"(?<![\d~])0 tokens", done[0]):
        out.append(f"latest.log shows 0 tokens as if measured: {done[0]}")
    elif usage_kind(v) == "estimated" and not re.search(r"(?i)estimat|~", done[0]):
        out.append(f"latest.log does not say its count is an estimate: {done[0]}")
    return out


def _judge(findings: list[str], v: dict[str, Any]) -> None:
    brief = {k: v.get(k) for k in ("verdict", "parse_state", "parse_error", "error", "steps", "tokens")}
    assert not findings, "\n".join([f"{len(findings)} finding(s) on {brief}:", *findings])


def test_explore_verdict_is_honest_about_usage_reason_and_facts(cli, git_repo: Path, tmp_path: Path,
                                                                 realmodel: RealModel) -> None:
    v, turns = _dispatch(cli, realmodel, git_repo, tmp_path, "explore",
                         "# Question: what does the function add in src/calc.py return?\n\n## Where to look\n"
                         "src/calc.py\n\n## What to report\n- Each fact with its file:line.")
    findings = _findings(v, turns, git_repo)
    if v["verdict"] == "completed":
        # the prompt's own example block, or facts about files that do not exist, are no result
        findings += explore_findings(v, git_repo)
    assert changed_files(git_repo) == []
    _judge(findings, v)


def test_code_verdict_matches_the_worktree(cli, git_repo: Path, tmp_path: Path, realmodel: RealModel) -> None:
    v, turns = _dispatch(cli, realmodel, git_repo, tmp_path, "code",
                         "# Task: add a function sub(a, b) to src/calc.py\n\n## Goal\nsub(5, 3) == 2.\n\n"
                         "## Files\n- may change: src/calc.py\n- read for context: src/calc.py\n\n"
                         "## Validation\nRun: python -c 'import sys; sys.path.insert(0, \"src\"); "
                         "from calc import sub; assert sub(5, 3) == 2'")
    findings = _findings(v, turns, git_repo)
    changed = changed_files(git_repo)
    result = v.get("result") or {}
    if v["verdict"] == "completed" and not changed:
        findings.append("a code run completed with no change in the worktree")
    elif v["verdict"] == "completed" and sorted(result.get("files_changed") or []) != changed:
        findings.append(f"files_changed {result.get('files_changed')} is not the worktree's diff {changed}")
    if result.get("status") == "complete" and not changed and v["verdict"] != "empty":
        findings.append(f"'complete' over an untouched worktree is {v['verdict']}, not empty")
    _judge(findings, v)


def test_plan_verdict_is_honest(cli, git_repo: Path, tmp_path: Path, realmodel: RealModel) -> None:
    v, turns = _dispatch(cli, realmodel, git_repo, tmp_path, "plan",
                         "# Plan: add sub and mul to the calculator\n\n## Request\nsrc/calc.py has add; "
                         "add sub(a, b) and mul(a, b) with a test each in tests/test_calc.py.\n\n"
                         "## Constraints\nnone")
    findings = _findings(v, turns, git_repo)
    if v["verdict"] == "completed":
        tasks = (v.get("result") or {}).get("tasks") or []
        if not tasks:
            findings.append(f"a plan run completed with no tasks: {v['result']}")
        # the prompt's example entry is not a plan
        findings += [f"a task copied from the prompt's template: {t}" for t in tasks
                     if PLACEHOLDER.search(json.dumps(t))]
    assert changed_files(git_repo) == []
    _judge(findings, v)


def test_providers_check_probes_tools_and_streamed_usage_and_names_what_is_missing(
        cli, git_repo: Path, realmodel: RealModel) -> None:
    r = cli("providers", "check", realmodel.provider, cwd=git_repo, timeout=300)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    asked = [ex.request or {} for ex in realmodel.exchanges() if ex.path.endswith("/chat/completions")]
    findings = []
    # the probe asks what the builtin runner relies on: a tool call with tool_choice auto, usage in a stream
    if not any(q.get("tools") and q.get("tool_choice", "auto") == "auto" for q in asked):
        findings.append("the check never offered the model a tool with tool_choice auto")
    if not any(q.get("stream") and (q.get("stream_options") or {}).get("include_usage") for q in asked):
        findings.append("the check never asked for usage in a stream")
    # this server drops the tools it is sent: "available" alone is not the truth
    if not NO_TOOLS.search(r.stdout + r.stderr):
        findings.append(f"the check does not say the model made no tool call: {(r.stdout + r.stderr).strip()!r}")
    assert not findings, "\n".join([f"{len(asked)} request(s) reached the server:", *findings])


def test_an_answer_cut_off_at_the_output_cap_says_so(cli, git_repo: Path, tmp_path: Path, realmodel: RealModel) -> None:
    capped = RealModel(realmodel.server, "smollm2-capped", realmodel.mark)
    write_provider(capped.provider, realmodel.server.url, output_tokens=12)
    v, turns = _dispatch(cli, capped, git_repo, tmp_path, "explore",
                         "# Question: explain every line of src/calc.py in detail.\n\n## Where to look\n"
                         "src/calc.py\n\n## What to report\n- Each fact with its file:line.")
    assert turns[-1].finish_reason == "length", [ex.finish_reason for ex in turns]  # the server cut it off
    reason = reason_of(v)
    assert v["verdict"] != "completed" and CUT_OFF.search(reason), (
        f"an answer cut off at the output cap is {v['verdict']} ({v['parse_state']}) with the reason {reason!r}")


def test_a_server_without_streamed_usage_is_counted_by_its_own_tokenizer_within_five_percent(
        cli, git_repo: Path, tmp_path: Path, realmodel: RealModel) -> None:
    from pilothouse.providers import capability_store

    checked = cli("providers", "check", realmodel.provider, cwd=git_repo, timeout=300)
    assert "Traceback" not in checked.stdout + checked.stderr, checked.stderr
    # the probe finds the tokenizer and that this template drops the tool declarations
    caps = capability_store.get(realmodel.provider, ALIAS) or {}
    counting = caps.get("counting") or {}
    assert counting.get("tokenizer") == "/extras/tokenize/count" and counting.get("tools_counted") is False, caps
    # llama.cpp repeats the tool's name in every streamed delta: read once, the forced call is seen
    assert caps.get("tools_forced") is True, caps
    v, turns = _dispatch(cli, realmodel, git_repo, tmp_path, "explore",
                         "# Question: what does src/calc.py define?\n\n## Where to look\nsrc/calc.py")
    assert turns and usage_kind(v) == "estimated", v
    served_in = sum(ex.prompt_tokens for ex in turns)
    served_out = sum(ex.completion_tokens for ex in turns)
    ours_in = v["tokens"]["input"] + v["tokens"]["cache_read"]
    ours_out = v["tokens"]["output"] + v["tokens"]["reasoning"]
    assert abs(ours_in - served_in) <= 0.05 * served_in, (ours_in, served_in)
    assert abs(ours_out - served_out) <= max(2, 0.05 * served_out), (ours_out, served_out)
