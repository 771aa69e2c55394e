"""`pilothouse mcp --worker --job NAME`: a worker reads its job's request, decisions and screenshots,
and no route reaches a tool that writes (driven by the SDK's own stdio client)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_client import connect, data, error, run, sim_repo
from support import guard

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    from pilothouse.core.records import jobs
    from pilothouse.core.records.layout import RepoLayout

    root = sim_repo(tmp_path / "scratch", "accept")
    (tmp_path / "shot.png").write_bytes(PNG)
    layout = RepoLayout(root)
    jobs.create_job(layout, "count", "Count words.", acceptance="wordcount('a b') == 2",
                    attachments=[tmp_path / "shot.png"])
    jobs.update_job(layout, "count", "Count words, not dashes.")
    jobs.decide(layout, "count", "no regex")
    return root


def test_the_worker_reads_its_jobs_request_decisions_and_screenshots(repo: Path) -> None:
    async def go() -> None:
        async with connect(repo, "--worker", "--job", "count") as c:
            req = data(await c.call_tool("job_request", {}))
            assert req["request"] == "Count words, not dashes." and req["revision"] == 2
            assert req["earlier"] == [{"revision": 1, "request": "Count words."}]
            assert req["acceptance"] == "wordcount('a b') == 2"
            assert data(await c.call_tool("job_decisions", {})) == ["no regex"]
            shot = await c.call_tool("job_attachment", {"index": 0})
            assert not shot.is_error and shot.content[0].type == "image"
            assert shot.content[0].mime_type == "image/png"
            assert "1 attachment(s)" in error(await c.call_tool("job_attachment", {"index": 1}))
    run(go)


def test_no_write_tool_is_reachable_from_the_worker_profile(repo: Path) -> None:
    from pilothouse.core.mcp.worker import WORKER_TOOLS

    before = (repo / ".ai/jobs/count.json").read_text()
    writes = {"job_create": {"name": "evil", "request": "x"}, "job_update": {"name": "count", "request": "x"},
              "job_decide": {"name": "count", "text": "approve"}, "task_define": {"job": "count", "tasks": []},
              "job_plan_ready": {"name": "count"}, "job_start": {}, "job_stop": {},
              "problem_act": {"code": "AAAAAA", "reply": "accept"}}

    async def go() -> None:
        async with connect(repo, "--worker", "--job", "count") as c:
            assert {t.name for t in (await c.list_tools()).tools} == set(WORKER_TOOLS)
            assert (await c.list_resource_templates()).resource_templates == []
            for name, args in writes.items():
                assert error(await c.call_tool(name, args)).startswith(f"unknown tool {name!r}")
            # the other job's request is not its to read either: the profile is bound to one job
            assert "job" not in (await c.list_tools()).tools[0].input_schema.get("properties", {})
    run(go)
    assert (repo / ".ai/jobs/count.json").read_text() == before
    assert not (repo / ".ai/jobs/evil.json").exists()
    assert not (repo / ".ai/runtime/state.db").exists()  # nothing started, nothing answered


def test_an_attachment_path_outside_the_jobs_folder_is_refused(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    record = repo / ".ai/jobs/count.json"
    original = record.read_text()
    job = json.loads(original)
    stored = repo / job["attachments"][0]["path"]
    # a `..` path makes the whole record invalid: it is refused when the record is read
    job["attachments"].append({**job["attachments"][0], "path": str(Path("..") / "secret.png")})
    record.write_text(json.dumps(job))

    async def dotdot() -> None:
        async with connect(repo, "--worker", "--job", "count") as c:
            assert "is not under .ai/runtime/attachments/" in error(
                await c.call_tool("job_attachment", {"index": 1}))
    run(dotdot)

    # a link inside the attachments folder that leads out of it is refused, the others still served
    job = json.loads(original)
    link = stored.with_name("link.png")
    link.symlink_to(secret)
    job["attachments"].append({**job["attachments"][0], "path": str(link.relative_to(repo))})
    record.write_text(json.dumps(job))

    async def go() -> None:
        async with connect(repo, "--worker", "--job", "count") as c:
            assert "not in" in error(await c.call_tool("job_attachment", {"index": 1}))
            assert not (await c.call_tool("job_attachment", {"index": 0})).is_error
    run(go)


def test_the_worker_profile_needs_its_job(repo: Path) -> None:
    def mcp(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pilothouse", "mcp", *args], cwd=repo, capture_output=True,
                              text=True, timeout=guard(30), stdin=subprocess.DEVNULL)

    out = mcp("--worker")
    assert out.returncode == 2 and out.stderr == (
        "pilothouse: --worker needs --job NAME: a worker sees only the job it works for\n")
    out = mcp("--worker", "--job", "../etc")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_dispatch_copies_the_job_into_the_run_and_the_worker_server_reads_only_that_copy(repo: Path,
                                                                                         tmp_path: Path) -> None:
    """What an agent CLI worker is given (core/dispatch/jobcontext.py): the record and screenshots,
    copied into its sandbox, and a server that reads them there; no store, no events, no other job."""
    from pilothouse.core.dispatch.jobcontext import write_job_context
    from pilothouse.core.records import jobs
    from pilothouse.core.records.layout import RepoLayout

    jobs.create_job(RepoLayout(repo), "other", "Something else.")
    sandbox = tmp_path / "run"
    sandbox.mkdir()
    server = write_job_context(repo, "count", sandbox)
    assert server is not None and server["name"] == "pilothouse"
    assert server["args"][-3:] == ["count", "--context", str(sandbox / "job")] and "-I" in server["args"]
    copied = sorted(str(p.relative_to(sandbox / "job")) for p in (sandbox / "job").rglob("*") if p.is_file())
    shot = json.loads((repo / ".ai/jobs/count.json").read_text())["attachments"][0]["path"]
    assert copied == sorted([".ai/jobs/count.json", shot])
    (repo / ".ai/jobs/count.json").unlink()  # the server reads the copy, not the repository

    async def go() -> None:
        async with connect(tmp_path, "--worker", "--job", "count", "--context", str(sandbox / "job")) as c:
            assert data(await c.call_tool("job_request", {}))["request"] == "Count words, not dashes."
            assert data(await c.call_tool("job_decisions", {})) == ["no regex"]
            assert not (await c.call_tool("job_attachment", {"index": 0})).is_error
    run(go)
    assert write_job_context(repo, "missing", sandbox) is None  # tasks defined by hand: nothing to serve
