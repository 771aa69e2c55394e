"""A canary key set for the sim: delivered to the worker (the sim accepts it), yet in no child's
argv or environment and in no byte under the log and sandbox trees; and a whole job over every
runner (builtin and the real agent CLIs; code, resume and test), whose workers read their own key,
leaves no form of it in any file of the pilothouse home, any commit or any .ai record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pilothouse.providers import paths
from pilothouse.providers.redact import secret_forms
from support import guard

CANARY = "sk-canary-9f8e7d6c5b4a3210"


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                parents[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def test_canary_key_never_leaks(cli, git_repo, tmp_path):
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    task = tmp_path / "t.md"
    task.write_text("Explain src/calc.py.\n")
    # 1. the key reaches the worker: the sim was started with it and answers 401 to anything else
    r = cli("dispatch", "--provider", "sim", "--mode", "explore", "--workdir", str(git_repo),
            "--task-file", str(task))
    v = json.loads(r.stdout.splitlines()[-1])
    assert v["verdict"] == "completed", v
    # 2. while a (slow) run is live, no child carries it in argv or environment
    p = subprocess.Popen([sys.executable, "-m", "pilothouse", "dispatch", "--provider", "sim", "--mode", "code",
                          "--workdir", str(git_repo), "--task-file", str(task), "--scenario", "slow",
                          "--timeout", "2.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    json.loads(p.stdout.readline())
    seen: set[int] = set()
    # looked at for the dispatch's whole life (it ends at its own --timeout), however slow the machine
    while p.poll() is None:
        for pid in _descendants(p.pid):
            for what in ("cmdline", "environ"):
                try:
                    data = Path(f"/proc/{pid}/{what}").read_bytes()
                except OSError:
                    continue
                seen.add(pid)
                assert CANARY.encode() not in data, (pid, what)
        time.sleep(0.1)
    assert seen, "no child process was observed"
    rest, err = p.communicate(timeout=guard(20))
    assert json.loads(rest.splitlines()[-1])["timed_out"] is True
    # 3. not a byte of it under logs or sandboxes (the key file itself lives in secrets_dir)
    hits = []
    for base in (paths.logs_dir(), paths.providers_dir()):
        for f in base.rglob("*"):
            if f.is_file() and not f.is_symlink() and CANARY.encode() in f.read_bytes():
                hits.append(str(f))
    assert hits == []
    assert CANARY not in r.stdout + r.stderr + rest + err
    key_file = paths.secrets_dir() / "sim.key"
    assert key_file.read_text().strip() == CANARY and oct(key_file.stat().st_mode & 0o777) == "0o600"


# provider (its runner) -> the model assignment that sends one task to it
RUNNERS = {"sim": "builtin", "sim-opencode": "opencode", "sim-claude": "claude-code", "sim-codex": "codex"}


def _canary_job() -> str:
    """Four tasks, one per runner; each builder reads its credential (so the key reaches its
    session files), writes its file, is sent back once by the review and resumes."""
    tasks = [{"id": f"t-{n}", "title": f"Task {n}", "kind": "SAFE_PARALLEL", "model_assignment": f"a{n}",
              "expected_paths": {"write": [f"t-{n}.txt"]}} for n in range(len(RUNNERS))]
    scripts: list[dict[str, object]] = [
        {"match": {"mode": "plan"}, "turns": [{"say": "<!--RESULT-->" + json.dumps({"tasks": tasks})
                                                      + "<!--/RESULT-->"}]}]
    for t in tasks:
        f = f"{t['id']}.txt"
        done = "<!--RESULT-->" + json.dumps({"status": "complete", "files_changed": [f], "risks": [],
                                             "validation": {"commands": [], "passed": True}}) + "<!--/RESULT-->"
        scripts.append({"match": {"mode": "code", "contains": [f"task: {t['id']}"]}, "turns": [
            {"say": "Checking my credential.", "actions": [{"bash": {
                "command": 'cat "$HOME/../credential"; base64 -w0 "$HOME/../credential"; echo'}}]},
            {"say": "Writing the file.", "actions": [{"write": {"path": f, "content": "one\n"}}]},
            {"say": done},
            {"say": "Reading it again.", "actions": [{"read": {"path": f}}]},
            {"say": "Adding the line the review asked for.", "actions": [{"edit": {"path": f, "old": "one",
                                                                                   "new": "one\ntwo"}}]},
            {"say": done}]})
        scripts.append({"match": {"mode": "review", "contains": [f"task: {t['id']}", "review round: 2"]},
                        "turns": [{"say": '<!--RESULT-->{"overall":"PASS","findings":[]}<!--/RESULT-->'}]})
        scripts.append({"match": {"mode": "review", "contains": [f"task: {t['id']}"]}, "turns": [{
            "say": "<!--RESULT-->" + json.dumps({"overall": "CHANGES", "findings": [{
                "severity": "major", "file_line": f"{f}:1", "summary": "a second line is missing",
                "suggested_fix": "add two"}]}) + "<!--/RESULT-->"}]})
    scripts.append({"match": {"mode": "test"}, "turns": [
        {"say": "Checking my credential.", "actions": [{"bash": {"command": 'cat "$HOME/../credential"'}}]},
        {"say": "<!--RESULT-->" + json.dumps({"command": "true", "passed": 1, "failed": 0}) + "<!--/RESULT-->"}]})
    return yaml.safe_dump({"name": "canary-job", "description": "one task per runner", "scripts": scripts})


def _holding(base: Path, forms: list[bytes]) -> list[str]:
    secrets = paths.secrets_dir()
    out = []
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            f = Path(dirpath) / name
            if f.is_symlink() or not f.is_file() or f.is_relative_to(secrets) or f.name == "credential":
                continue
            data = f.read_bytes()
            out += [str(f) for form in forms if form in data]
    return sorted(set(out))


@pytest.mark.realcli
@pytest.mark.slow
def test_a_job_over_every_runner_leaves_no_form_of_the_key_anywhere(tmp_path: Path, cli) -> None:
    from pilothouse.core import demo
    from pilothouse.providers.runners.npm import find_binary

    for runner in ("opencode", "claude-code", "codex"):
        if find_binary(runner) is None:
            pytest.fail(f"the {runner} CLI is not installed: run scripts/install-runners and export "
                        "PILOTHOUSE_TEST_RUNNERS=$PWD/.runners", pytrace=False)
    for provider in RUNNERS:
        r = cli("key", "set", provider, "--from-stdin", "--backend", "file", input=CANARY + "\n")
        assert r.returncode == 0, r.stderr
    scenario = tmp_path / "canary-job.yaml"
    scenario.write_text(_canary_job())
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    project = yaml.safe_load(layout.project_yaml.read_text())
    project["gates"] = {"fast": "true", "full": "true"}
    project["workflow"]["review"] = "ai"
    project["max_workers"] = 2
    project["model_policy"]["assignments"] = {f"a{n}": {"provider": p} for n, p in enumerate(RUNNERS)}
    layout.project_yaml.write_text(yaml.safe_dump(project, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", "one task per runner"], cwd=layout.root, check=True)
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(900))
    assert done.returncode == 0, done.stderr[-3000:]

    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    runs = {(e["data"]["provider"], e["data"]["mode"]) for e in events if e["type"] == "run.started"
            and e["data"]["role"] == "builder"}
    assert runs == {(p, m) for p in RUNNERS for m in ("code", "resume")}, runs
    merged = [e["task"] for e in events if e["type"] == "task.state" and e["data"]["to"] == "done"]
    assert sorted(merged) == [f"t-{n}" for n in range(len(RUNNERS))], merged
    # the one writing mode no job uses: a test run per runner, straight through dispatch
    scratch = tmp_path / "scratch"
    subprocess.run(["git", "clone", "-q", str(layout.root), str(scratch)], check=True)
    task = tmp_path / "test-task.md"
    task.write_text("Run the tests.\n")
    for provider in RUNNERS:
        r = cli("dispatch", "--provider", provider, "--mode", "test", "--workdir", str(scratch), "--task-file",
                str(task), "--scenario", str(scenario), "--timeout", "120", "--in-place", timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout.splitlines()[-1])["verdict"] == "completed", r.stdout[-2000:]
        assert not any(f in r.stdout + r.stderr for f in secret_forms(CANARY))
    forms = sorted({f.encode() for f in secret_forms(CANARY)})
    assert _holding(Path(os.environ["PILOTHOUSE_HOME"]), forms) == []
    assert _holding(Path(os.environ["HOME"]), forms) == []
    assert _holding(layout.ai, forms) == []
    history = subprocess.run(["git", "log", "--all", "-p", "--text", "--format=%H %B"], cwd=layout.root,
                             check=True, capture_output=True).stdout
    assert not any(f in history for f in forms)
    assert cli("scan-secrets", str(layout.root)).returncode == 0
