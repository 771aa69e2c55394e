"""Job records: revisions keep the original, attachments are checked by content."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from pilothouse.core.records import jobs
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventTailer
from pilothouse.providers.errors import UserError
from support import guard


def png_bytes() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
            + chunk(b"IEND", b""))


@pytest.fixture
def layout(git_repo: Path) -> RepoLayout:
    return RepoLayout(git_repo)


def test_create_update_decide(layout: RepoLayout) -> None:
    job = jobs.create_job(layout, "first-draft", "Add a slugify helper.", acceptance="slug('A B') == 'a-b'")
    assert job.revision == 1 and job.request == "Add a slugify helper."
    on_disk = json.loads((layout.jobs_dir / "first-draft.json").read_text())
    assert on_disk["revisions"][0]["request"] == "Add a slugify helper."
    job = jobs.update_job(layout, "first-draft", "Also strip accents.")
    assert job.revision == 2 and job.request == "Also strip accents."
    assert job.revisions[0].request == "Add a slugify helper."  # the original is kept
    job = jobs.decide(layout, "first-draft", "use unicodedata, no new dependency")
    assert [d.text for d in jobs.load_job(layout, "first-draft").decisions] == ["use unicodedata, no new dependency"]
    pinned = jobs.pin_coordinator(layout, "first-draft", "sim", "sim-large")
    again = jobs.pin_coordinator(layout, "first-draft", "other")
    assert pinned.coordinator and again.coordinator and again.coordinator.provider == "sim"
    types = [e["type"] for e in EventTailer(layout.events).read_new()]
    assert types == ["job.created", "job.revised", "job.decided", "job.pinned"]
    assert [j.name for j in jobs.list_jobs(layout)] == ["first-draft"]


def test_refusals(layout: RepoLayout) -> None:
    with pytest.raises(UserError, match="not valid"):
        jobs.create_job(layout, "Bad Name", "x")
    with pytest.raises(UserError, match="request is empty"):
        jobs.create_job(layout, "j", "  \n")
    jobs.create_job(layout, "j", "x")
    with pytest.raises(UserError, match="already exists: correct it with `pilothouse job update j"):
        jobs.create_job(layout, "j", "y")
    with pytest.raises(UserError, match="no job named 'nope'"):
        jobs.update_job(layout, "nope", "y")


def test_attachments_by_content(layout: RepoLayout, tmp_path: Path) -> None:
    real = tmp_path / "screenshot.dat"  # the name says nothing; the bytes say PNG
    real.write_bytes(png_bytes())
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"not an image at all")
    webp = tmp_path / "w"
    webp.write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8)
    with pytest.raises(UserError, match="fake.png: not a PNG, JPEG, GIF or WebP image"):
        jobs.create_job(layout, "j", "look", attachments=[real, fake])
    assert not (layout.jobs_dir / "j.json").exists()  # nothing half-created
    job = jobs.create_job(layout, "j", "look", attachments=[real, webp])
    assert [a.mime for a in job.attachments] == ["image/png", "image/webp"]
    stored = job.attachment_paths(layout)
    assert all(p.is_relative_to(layout.attachments / "j") and p.exists() for p in stored)
    assert stored[0].read_bytes() == png_bytes()
    job = jobs.update_job(layout, "j", "again", attachments=[real])  # same content: not stored twice
    assert len(job.attachments) == 2


def test_attachment_limits(layout: RepoLayout, tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(png_bytes() + b"\x00" * (8 * 1024 * 1024))
    with pytest.raises(UserError, match="over the 8 MB limit"):
        jobs.create_job(layout, "j", "x", attachments=[big])
    files = []
    for i in range(11):
        f = tmp_path / f"{i}.gif"
        f.write_bytes(b"GIF89a" + bytes([i]) * 10)
        files.append(f)
    with pytest.raises(UserError, match="at most 10 screenshots"):
        jobs.create_job(layout, "j", "x", attachments=files)
    job = jobs.create_job(layout, "j", "x", attachments=files[:10])
    assert len(job.attachments) == 10
    with pytest.raises(UserError, match="at most 10"):
        jobs.update_job(layout, "j", "y", attachments=files[10:])


def test_job_cli(git_repo: Path, tmp_path: Path, cli) -> None:
    assert cli("init", "--gate-fast", "true", cwd=git_repo).returncode == 0
    req = tmp_path / "request.md"
    req.write_text("Add slugify.\n")
    shot = tmp_path / "shot.bin"
    shot.write_bytes(png_bytes())
    proc = cli("job", "create", "first-draft", "--request-file", str(req), "--attach", str(shot), cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert "created job first-draft (revision 1, 1 screenshot(s))" in proc.stdout
    proc = cli("job", "create", "x", "--request-file", str(tmp_path / "missing.md"), cwd=git_repo)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("no such file")
    req.write_text("Also handle accents.\n")
    assert cli("job", "update", "first-draft", "--request-file", str(req), cwd=git_repo).returncode == 0
    assert cli("job", "decide", "first-draft", "no", "new", "deps", cwd=git_repo).returncode == 0
    status = json.loads(cli("job", "status", "first-draft", "--json", cwd=git_repo).stdout)
    assert status["state"] == "not started" and status["revision"] == 2 and status["tasks"] == []
    listed = json.loads(cli("job", "list", "--json", cwd=git_repo).stdout)
    assert [(j["name"], j["revision"], j["decisions"], j["attachments"]) for j in listed] == [
        ("first-draft", 2, 1, 1)]
    assert "not started" in cli("job", "status", cwd=git_repo).stdout


def test_task_define_cli(git_repo: Path, tmp_path: Path, cli) -> None:
    assert cli("init", "--gate-fast", "true", cwd=git_repo).returncode == 0
    jobs.create_job(RepoLayout(git_repo), "j", "do it")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  - id: a\n    title: A\n    kind: NOPE\n  - id: b\n    title: B\n"
                   "    depends_on: [a, ghost]\n    expected_paths: {write: [/abs]}\n")
    proc = cli("task", "define", "--file", str(bad), "--job", "j", cwd=git_repo)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    for bit in ("task 'a': kind: unknown kind 'NOPE'", "task 'b': expected_paths.write: '/abs' is absolute",
                "task 'b': depends_on: unknown task 'ghost'"):
        assert bit in proc.stderr
    leaky = tmp_path / "leaky.yaml"
    leaky.write_text("- id: a\n  title: A\n  description: call it with ghp_abcdefghijklmnopqrstuvwxyz0123\n")
    proc = cli("task", "define", "--file", str(leaky), "--job", "j", cwd=git_repo)
    assert proc.returncode == 2 and "GitHub token (ghp_…) on line 3" in proc.stderr and "ghp_abc" not in proc.stderr
    assert not (git_repo / ".ai" / "tasks.yaml").exists()
    good = tmp_path / "good.yaml"
    good.write_text("- id: a\n  title: A\n- id: b\n  title: B\n  depends_on: a\n")
    proc = cli("task", "define", "--file", str(good), "--job", "j", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert [t["id"] for t in json.loads(proc.stdout)] == ["a", "b"]
    assert "- id: b" in (git_repo / ".ai" / "tasks.yaml").read_text()
    types = [e["type"] for e in EventTailer(RepoLayout(git_repo).events).read_new()]
    assert types.count("task.defined") == 2
    proc = cli("task", "define", "--file", str(good), "--job", "nope", cwd=git_repo)
    assert proc.returncode == 2 and "no job named 'nope'" in proc.stderr


def test_job_status_reads_the_store(git_repo: Path, cli) -> None:
    from pilothouse.core.state import store

    layout = RepoLayout(git_repo)
    jobs.create_job(layout, "j", "do it")
    conn = store.connect(layout.state_db)
    now = "2026-11-29T07:00:00.000Z"
    conn.execute("INSERT INTO jobs_state(job, state, revision, planned_revision, tokens, created_at, updated_at) "
                 "VALUES ('j', 'running', 1, 1, 4200, ?, ?)", (now, now))
    conn.execute("INSERT INTO tasks(job, task, state, kind, reason, updated_at) VALUES "
                 "('j', 'a', 'stopped', 'SAFE_PARALLEL', 'gate fast failed: exit 1', ?)", (now,))
    conn.execute("INSERT INTO problems(code, job, task, kind, summary, replies, state, opened_at) VALUES "
                 "('KXMRTB', 'j', 'a', 'gate_failed', 'gate fast failed', '[\"retry\", \"skip\"]', 'open', ?)", (now,))
    conn.close()
    status = json.loads(cli("job", "status", "j", "--json", cwd=git_repo).stdout)
    assert status["state"] == "running" and status["tokens"] == 4200
    assert [(t["task"], t["state"], t["reason"]) for t in status["tasks"]] == [
        ("a", "stopped", "gate fast failed: exit 1")]
    assert status["problems"][0]["code"] == "KXMRTB" and status["problems"][0]["replies"] == ["retry", "skip"]
    human = cli("job", "status", cwd=git_repo).stdout
    assert "job j: running (revision 1, planned 1, 4200 tokens)" in human
    assert "problem KXMRTB (a: gate_failed): gate fast failed  [retry | skip]" in human


def test_job_status_labels_a_total_that_holds_an_estimate(git_repo: Path, cli) -> None:
    from pilothouse.core.state import store

    layout = RepoLayout(git_repo)
    jobs.create_job(layout, "j", "do it")
    conn = store.connect(layout.state_db)
    now = "2026-11-29T07:00:00.000Z"
    conn.execute("INSERT INTO jobs_state(job, state, revision, planned_revision, tokens, created_at, updated_at) "
                 "VALUES ('j', 'running', 1, 1, 900, ?, ?)", (now, now))
    conn.execute("INSERT INTO tasks(job, task, state, kind, tokens, updated_at) VALUES "
                 "('j', 'a', 'done', 'SAFE_PARALLEL', 600, ?), ('j', 'b', 'done', 'SAFE_PARALLEL', 300, ?)", (now, now))
    for run, task, usage, tokens in (("r1", "a", "estimated", 600), ("r2", "b", "measured", 300)):
        verdict = json.dumps({"verdict": "completed", "usage": usage,
                              "tokens": {"input": tokens, "output": 0, "reasoning": 0}})
        conn.execute("INSERT INTO runs(run_id, job, task, role, provider, mode, state, verdict, tokens, started_at) "
                     "VALUES (?, 'j', ?, 'builder', 'local', 'code', 'finished', ?, ?, ?)",
                     (run, task, verdict, tokens, now))
    conn.close()
    status = json.loads(cli("job", "status", "j", "--json", cwd=git_repo).stdout)
    assert (status["tokens"], status["usage"]) == (900, "estimated")
    assert [(t["task"], t["usage"]) for t in status["tasks"]] == [("a", "estimated"), ("b", "measured")]
    assert "planned 1, ~900 tokens (estimated))" in cli("job", "status", cwd=git_repo).stdout


def test_job_create_needs_init(git_repo: Path, tmp_path: Path, cli) -> None:
    req = tmp_path / "r.md"
    req.write_text("x\n")
    proc = cli("job", "create", "j", "--request-file", str(req), cwd=git_repo)
    assert proc.returncode == 2 and "run `pilothouse init`" in proc.stderr


def test_a_job_record_whose_attachment_points_outside_the_attachments_is_refused(layout: RepoLayout,
                                                                                 tmp_path: Path) -> None:
    real = tmp_path / "shot.png"
    real.write_bytes(png_bytes())
    jobs.create_job(layout, "j", "look", attachments=[real])
    record = layout.jobs_dir / "j.json"
    data = json.loads(record.read_text())
    # as a merged worker branch could rewrite it: the next read would hand ~/.ssh to the model
    data["attachments"][0]["path"] = ".ai/runtime/attachments/../../../../home/me/.ssh/id_ed25519"
    record.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"j\.json: attachments\.0\.path: .*not under \.ai/runtime/attachments/"):
        jobs.load_job(layout, "j")


ONE_FILE = """
name: my-repo-script
description: one task that writes NOTES.md in the user's own repository
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"notes","title":"Notes","kind":"SAFE_PARALLEL","expected_paths":{"write":["NOTES.md"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Writing NOTES.md"
        actions:
          - write: {path: NOTES.md, content: "notes\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["NOTES.md"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def test_a_job_created_with_its_own_sim_scenario_runs_every_role_on_the_simulator(git_repo: Path, tmp_path: Path,
                                                                                    cli) -> None:
    import subprocess
    import sys

    import yaml
    from pilothouse.core.state import store

    assert cli("init", "--gate-fast", "true", "--gate-full", "true", cwd=git_repo).returncode == 0
    layout = RepoLayout(git_repo)
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    # the project's own policy names a real provider: a job scripted by the sim must not reach it
    data["model_policy"] = {"roles": {"coordinator": "glm"}, "assignments": {"real": {"provider": "glm"}}}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "pilothouse init"], cwd=git_repo, check=True)
    (tmp_path / "req.md").write_text("Add notes.\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndescription: d\nscripts: []\n")
    r = cli("job", "create", "j", "--request-file", str(tmp_path / "req.md"), "--sim-scenario", str(bad), cwd=git_repo)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "bad.yaml" in r.stderr
    assert not (layout.jobs_dir / "j.json").exists()

    scen = tmp_path / "mine.yaml"
    scen.write_text(ONE_FILE)
    r = cli("job", "create", "j", "--request-file", str(tmp_path / "req.md"), "--sim-scenario", str(scen),
            cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert jobs.load_job(layout, "j").sim_scenario == str(scen.resolve())
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(git_repo), "--once"],
                          capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    conn = store.connect(layout.state_db, readonly=True)
    state = conn.execute("SELECT state FROM jobs_state WHERE job='j'").fetchone()["state"]
    providers = {r["provider"] for r in conn.execute("SELECT provider FROM runs")}
    conn.close()
    assert state == "accepted" and providers == {"sim"}
    assert subprocess.run(["git", "show", "pilothouse/integration/j:NOTES.md"], cwd=git_repo, capture_output=True,
                          text=True).stdout == "notes\n"


BLOCKED = """
name: blocked
description: the builder is blocked, so the job waits for the operator's words
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: |
          Which API should I call?
          <!--RESULT-->{"status":"blocked","files_changed":[],"validation":{"commands":[],"passed":false},"risks":[],"blocked_reason":"which API?"}<!--/RESULT-->
"""


def test_a_key_pasted_into_a_job_or_a_reply_is_refused_before_anything_is_stored(tmp_path: Path, cli) -> None:
    import base64
    import subprocess
    import sys

    from pilothouse.core import demo
    from pilothouse.core.stops import problems
    from pilothouse.providers import paths
    from pilothouse.providers.redact import secret_forms

    key = "sk-canary-pasted-0f1e2d3c4b5a"
    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=key + "\n").returncode == 0
    scenario = tmp_path / "blocked.yaml"
    scenario.write_text(BLOCKED)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    root = str(layout.root)
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", root, "--once"],
                          capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    [p] = problems.list_problems(layout, True, job="demo")
    assert p.kind == "builder_blocked" and "hint" in p.replies

    def refused(*args: str, what: str) -> None:
        r = cli(*args, "--repo", root) if args[0] == "job" else cli(*args, cwd=layout.root)
        assert r.returncode != 0, (args, r.stdout)
        line = r.stderr.strip()
        assert "\n" not in line and what in line and "configured provider key" in line, line
        assert not any(f in r.stdout + r.stderr for f in secret_forms(key))

    request = tmp_path / "request.md"
    request.write_text(f"Call the API.\nUse the key {key} for it.\n")
    refused("job", "create", "pasted", "--request-file", str(request), what="the request contains")
    refused("job", "update", "demo", "--request-file", str(request), what="the correction contains")
    basic = base64.b64encode(f"me:{key}".encode()).decode()
    refused("job", "decide", "demo", f"authenticate with Basic {basic}", what="the decision contains")
    refused("problem", "act", p.code, "hint", f"the key is {key}", what="your hint words contain")
    refused("problem", "act", p.code, "plan", f"plan around {key}", what="your plan words contain")
    named = tmp_path / f"{key}.png"
    named.write_bytes(png_bytes())
    ok = tmp_path / "ok.md"
    ok.write_text("Call the public API.\n")
    refused("job", "update", "demo", "--request-file", str(ok), "--attach", str(named),
            what="the name of attachment #1 contains")

    # nothing stored: no job record, no revision, no decision, no reply, no event, no run file
    assert not (layout.jobs_dir / "pasted.json").exists()
    job = jobs.load_job(layout, "demo")
    assert (job.revision, job.decisions, job.attachments) == (1, [], [])
    assert problems.get_problem(layout, p.code).pending is None
    forms = [f.encode() for f in secret_forms(key)]
    for base in (layout.root, paths.logs_dir(), paths.providers_dir()):
        for f in Path(base).rglob("*"):
            if f.is_file() and not f.is_symlink() and f.name != "credential" and ".git" not in f.parts:
                data = f.read_bytes()
                assert not any(form in data for form in forms), f
    # the same words without the key are taken
    assert cli("problem", "act", p.code, "hint", "call the public API", cwd=layout.root).returncode == 0


def test_an_attachment_swapped_for_a_fifo_or_a_linked_folder_is_refused_without_blocking(tmp_path):
    import os

    layout = RepoLayout(tmp_path)
    folder = layout.attachments / "j1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "shot.png")
    rel = str((folder / "shot.png").relative_to(tmp_path))
    with pytest.raises(UserError, match="not a regular file"):
        jobs.read_attachment(layout, "j1", rel)
    (folder / "real.png").write_bytes(b"png")
    assert jobs.read_attachment(layout, "j1", str((folder / "real.png").relative_to(tmp_path))) == b"png"
