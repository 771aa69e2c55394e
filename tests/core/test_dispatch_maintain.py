"""maintain runs|logs: age and keep rules; live runs and the newest M are kept."""

from __future__ import annotations

import os
import time

from pilothouse.providers import paths, sandbox


def _old_run(key: str, run_id: str, days: float) -> None:
    root = sandbox.make_sandbox(key, run_id).root
    logs = sandbox.RunLogs(key, run_id)
    t = time.time() - days * 86400
    for f in (logs.jsonl, logs.verdict):
        f.write_text("{}\n")
        os.utime(f, (t, t))
    os.utime(root, (t, t))


def test_prune_runs_and_logs(cli):
    _old_run("sim", "r-old-1", 10)
    _old_run("sim", "r-old-2", 9)
    _old_run("sim", "r-new", 0)
    live = sandbox.make_sandbox("sim", "r-live")
    sandbox.acquire_lock(live.root)  # this test process holds it: a live run
    t = time.time() - 20 * 86400
    os.utime(live.root, (t, t))
    os.symlink(paths.providers_dir() / "sim/runs/r-old-1", paths.providers_dir() / "sim/runs/r-resume")
    r = cli("maintain", "runs", "--older-than-days", "5", "--keep", "1", "--json")
    assert r.returncode == 0, r.stderr
    import json

    gone = {x["run_id"] for x in json.loads(r.stdout)}
    assert gone == {"r-old-1", "r-old-2"}
    runs = {p.name for p in (paths.providers_dir() / "sim/runs").iterdir()}
    assert runs == {"r-new", "r-live"}  # the resume link to a pruned run went with it
    r = cli("maintain", "logs", "--older-than-days", "5")
    assert r.returncode == 0 and "deleted 2 run logs" in r.stdout
    assert sorted(p.name for p in (paths.logs_dir() / "sim").iterdir()) == ["r-new.jsonl", "r-new.verdict.json"]


def test_worktrees_outside_a_repo_is_one_line(cli, tmp_path):
    r = cli("maintain", "worktrees", "list", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
