"""What of the repository a sandbox shows: a gate sees its task's worktree and the repository's git
dir, never the untracked files of the operator's checkout, and `sandbox.read` adds what a tool needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl

SECRET = "OPERATOR_DB_PASSWORD=hunter2-8d1f"


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory neither under $HOME nor /tmp (both hidden from every sandbox anyway), where
    operators keep checkouts too (/srv, /work, /var/tmp): there only the plan itself hides them."""
    base = Path(tempfile.mkdtemp(prefix="ph-repoview-", dir="/var/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _scenario(main: Path) -> dict[str, object]:
    # the repository's own check script, rewritten by the task: the gate runs it confined
    check = (f"if cat {main}/.env; then echo 'read the operator .env'; exit 1; fi\n"
             f"cat {main}/tools/version.txt || exit 2\n"
             "git log -1 --format=%s >/dev/null || exit 3\n")
    tasks = [{"id": "check", "title": "Check", "kind": "SAFE_PARALLEL", "expected_paths": {"write": ["check.sh"]}}]
    done = {"status": "complete", "files_changed": ["check.sh"], "validation": {"commands": [], "passed": True},
            "risks": []}
    return {"name": "gate-reads-env", "description": "a task's gate script reads the main checkout's .env",
            "scripts": [
                {"match": {"mode": "plan"}, "turns": [{"say": f"<!--RESULT-->{json.dumps({'tasks': tasks})}<!--/RESULT-->"}]},
                {"match": {"mode": "code"}, "turns": [
                    {"say": "Updating the check.", "actions": [{"write": {"path": "check.sh", "content": check}}]},
                    {"say": f"<!--RESULT-->{json.dumps(done)}<!--/RESULT-->"}]},
            ]}


def test_a_gate_cannot_read_the_operators_untracked_env_but_reads_what_sandbox_read_names(
        outside_tmp: Path, cli) -> None:
    main = outside_tmp / "repo"
    scenario = outside_tmp / "gate-reads-env.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(main)))
    layout = demo.prepare(main, str(scenario))
    (main / ".env").write_text(SECRET + "\n")  # untracked, the operator's
    (main / "tools").mkdir()
    (main / "tools" / "version.txt").write_text("toolchain 1.2\n")  # untracked too, but named below
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.update(gates={"fast": "sh check.sh", "full": "sh check.sh"}, sandbox={"read": ["tools"]},
                workflow={"mode": "feature", "review": "off"})
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
    finally:
        supervisor_ctl.stop(layout)
    conn = store.connect(layout.state_db, readonly=True)
    reasons = [r["reason"] for r in conn.execute("SELECT reason FROM tasks")]
    conn.close()
    assert w.returncode == 0, (w.stdout, w.stderr, reasons)
    runtime = [p for p in layout.runtime.rglob("*") if p.is_file()]
    assert not [p for p in runtime if "hunter2" in p.read_text(errors="replace")]


def test_sandbox_read_is_what_widens_the_view_and_it_cannot_reopen_a_hidden_tree(
        outside_tmp: Path, git_repo: Path, isolated_home: Path) -> None:
    from pilothouse.core.git.gates import run_command
    from pilothouse.core.records.project import ProjectConfig
    from pilothouse.providers import paths

    main = outside_tmp / "repo"
    shutil.copytree(git_repo, main)
    (main / "tools").mkdir()
    (main / "tools" / "version.txt").write_text("toolchain 1.2\n")
    wt = paths.data_dir() / "worktrees" / "wt"
    wt.parent.mkdir(parents=True)
    subprocess.run(["git", "worktree", "add", "-q", "-b", "task", str(wt)], cwd=main, check=True,
                   capture_output=True)
    cmd = f"cat {main}/tools/version.txt && git log -1 --format=%s"

    def gate(read: list[str]) -> str:
        res = run_command(cmd, wt, settings={"confinement": "on", "sandbox_read": read})
        return res.output_tail if res.passed else f"failed: {res.reason} {res.output_tail}"

    assert "No such file" in gate([])  # the checkout is hidden; git still works from its .git
    assert gate(["tools"]).split() == ["toolchain", "1.2", "initial"]
    assert gate([str(main / "tools")]).split() == ["toolchain", "1.2", "initial"]
    assert "sandbox.read in .ai/project.yaml" in gate([str(isolated_home.parent)])  # holds the hidden $HOME
    (isolated_home / ".ssh").mkdir()
    (isolated_home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (main / "vendor").symlink_to(isolated_home / ".ssh")  # as a merged branch could make a named entry
    out = gate(["vendor"]).replace(str(main), "MAIN")
    assert "vendor leads out of MAIN" in out and "PRIVATE KEY" not in out
    with pytest.raises(ValueError, match="sandbox.read"):
        ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}, "sandbox": {"read": ["../x"]}})
