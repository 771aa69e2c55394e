"""A whole sim job with builders on the real OpenCode CLI and the reviewer on the real Claude Code CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from support import wait_job
from test_runner_common import require_cli


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.realcli
@pytest.mark.slow
def test_demo_job_with_opencode_builders_and_a_claude_code_reviewer(tmp_path: Path, cli) -> None:
    require_cli("opencode")
    require_cli("claude-code")
    from pilothouse.core import demo

    layout = demo.prepare(tmp_path / "scratch")
    root = layout.root
    project = yaml.safe_load(layout.project_yaml.read_text())
    project["model_policy"]["assignments"] = {"oc": {"provider": "sim-opencode"}}
    project["model_policy"]["roles"]["reviewer"] = "sim-claude"
    layout.project_yaml.write_text(yaml.safe_dump(project, sort_keys=False))
    _git(root, "commit", "-qam", "builders on opencode, reviewer on claude-code")

    try:
        started = cli("job", "start", "--repo", str(root), timeout=60)
        assert started.returncode == 0, started.stdout + started.stderr
        waited = wait_job(cli, root, "demo")  # each agent CLI's start takes minutes on a busy machine
        assert waited.returncode == 0, waited.stdout[-3000:] + waited.stderr[-3000:]
    finally:
        cli("job", "stop", "--repo", str(root), timeout=60)

    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    runs = {(e["data"].get("role"), e["data"].get("provider")) for e in events if e["type"] == "run.started"}
    assert ("builder", "sim-opencode") in runs, runs
    assert ("reviewer", "sim-claude") in runs, runs
    assert not any(p == "sim" for role, p in runs if role in ("builder", "reviewer")), runs
    merges = _git(root, "log", "--first-parent", "--merges", "--format=%s", "pilothouse/integration/demo").splitlines()
    assert len(merges) == 4, merges
    assert any(e["type"] == "job.accepted" for e in events)
    # the supervisor names the job to each dispatch: the reviewer's CLI had the job's read-only
    # server, in its own run's config, reading the copy of the record in its sandbox
    from pilothouse.providers import paths

    review = next(e["run"] for e in events if e["type"] == "run.started" and e["data"].get("provider") == "sim-claude")
    sandbox = (paths.providers_dir() / "sim-claude" / "runs" / review).resolve()
    assert json.loads((sandbox / "job" / ".ai" / "jobs" / "demo.json").read_text())["name"] == "demo"
    server = json.loads((sandbox / "config" / "claude" / "mcp.json").read_text())["mcpServers"]["pilothouse"]
    assert server["args"][-4:-1] == ["--job", "demo", "--context"]
    assert Path(server["args"][-1]).resolve() == sandbox / "job"
