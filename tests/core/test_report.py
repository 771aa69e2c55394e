"""`pilothouse report JOB`: a real demo job's story as JSON that agrees with `job status` and `usage`,
as Markdown, and as one HTML page that the real Chromium opens offline, drawing the timeline and
loading nothing; a log from elsewhere with hostile text and an unredacted key shows neither."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import DevTools, artifacts_dir, chromium


def _json(cli: Any, root: Path, *args: str) -> Any:
    r = cli(*args, "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _open_offline(page_ws: str, page: Path, shot: Path) -> tuple[dict[str, Any], list[str]]:
    """Open `page` in Chromium: what the page holds, and every URL it asked for."""
    probe = ("JSON.stringify({title: document.title, text: document.body.innerText, "
             "bars: document.querySelectorAll('svg rect.bar').length, "
             "marks: document.querySelectorAll('svg path.mark').length, scripts: document.scripts.length, "
             "images: document.images.length, csp: document.querySelector('meta[http-equiv]').content, "
             "ready: document.readyState})")

    async def drive() -> tuple[dict[str, Any], list[str]]:
        async with aiohttp.ClientSession() as s, s.ws_connect(page_ws, max_msg_size=0) as ws:
            tools = DevTools(ws)
            for domain in ("Network", "Page", "Runtime"):
                await tools.send(f"{domain}.enable")
            await tools.send("Page.navigate", url=page.as_uri())
            seen: dict[str, Any] = {}
            for _ in range(600):  # until the page is parsed (a guard, not a goal)
                value = await tools.evaluate(probe)
                seen = json.loads(value) if isinstance(value, str) else {}
                if seen.get("ready") == "complete":
                    break
                await asyncio.sleep(0.1)
            await tools.screenshot(shot)
            asked = [e["params"]["request"]["url"] for e in tools.events if e.get("method") == "Network.requestWillBeSent"]
            return seen, asked

    return asyncio.run(drive())


def _offline(asked: list[str], page: Path) -> list[str]:
    return [u for u in asked if u != page.as_uri() and urllib.parse.urlsplit(u).scheme not in ("data",)]


def test_the_report_tells_the_demos_story_with_job_status_numbers_and_opens_offline_in_a_browser(
        cli: Any, tmp_path: Path) -> None:
    root = tmp_path / "demo"
    r = cli("demo", "--follow", "--dir", str(root), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = _json(cli, root, "report", "demo")
    status = _json(cli, root, "job", "status", "demo")
    assert (report["state"], report["tokens"], report["usage"]) == (status["state"], status["tokens"], status["usage"])
    assert {t["task"]: (t["state"], t["tokens"], t["review_round"], t["merged_sha"]) for t in report["tasks"]} == \
        {t["task"]: (t["state"], t["tokens"], t["review_round"], t["merged_sha"]) for t in status["tasks"]}
    usage = _json(cli, root, "usage", "demo")
    assert [(x["role"], x["runs"], x["tokens"], x["usage"], x["cost_usd"]) for x in report["by_role"]] == \
        [(x["role"], x["runs"], x["tokens"], x["usage"], x["cost_usd"]) for x in usage["rows"]]
    assert report["cost_usd"] == usage["cost_usd"] and report["head"]
    md = cli("report", "demo", "--md", cwd=root).stdout
    for heading in ("## Timeline", "## Tasks", "## Gate runs", "## Review rounds", "## Problems",
                    "## Tokens and cost by role", "## Tokens and cost by provider"):
        assert heading in md, heading
    assert f"accepted head: {report['head']}" in md and "CHANGES" in md  # add-titlecase's first review
    assert "| sim (simulator) |" in md  # the simulator says so wherever it shows
    assert "cost: $0.0000 (simulator)" in md and report["cost_label"] == "simulator"
    page = tmp_path / "report.html"
    w = cli("report", "demo", "--html", str(page), cwd=root)
    assert w.returncode == 0 and str(page) in w.stdout, w.stderr
    with chromium(tmp_path) as page_ws:
        seen, asked = _open_offline(page_ws, page, artifacts_dir(tmp_path) / "report.png")
    assert not _offline(asked, page), f"the report asked for more than itself: {asked}"
    assert seen["title"] == "pilothouse report: demo" and "default-src 'none'" in seen["csp"]
    assert seen["scripts"] == 0 and seen["images"] == 0
    bars = sum(len(lane["bars"]) for lane in report["lanes"])
    assert seen["bars"] == bars > 0 and seen["marks"] == len(report["marks"]) == 4
    for task in status["tasks"]:
        assert task["task"] in seen["text"] and task["merged_sha"][:10] in seen["text"]
    assert "state: accepted" in seen["text"] and f"{status['tokens']} tokens" in seen["text"]
    assert "sim (simulator)" in seen["text"]


HOSTILE = ('<img src="http://evil.example/pixel.png"><script src="https://evil.example/x.js"></script>'
           '\x1b]0;owned\x07\x1b[2J')
CANARY = "sk-canary-report-5e4d3c2b1a"


def test_hostile_worker_text_and_a_key_from_another_machines_log_are_inert_escaped_and_redacted(
        cli: Any, tmp_path: Path) -> None:
    from pilothouse.core.state.events import EventLog

    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n").returncode == 0
    copy = tmp_path / "copied"
    # written unredacted, as a machine that did not know this key would have
    log = EventLog(copy / ".ai/runtime/events.jsonl", redact=lambda s: s)
    log.append("task.state", job="j", task="t1", run="r1", data={"from": "ready", "to": "running", "reason": HOSTILE})
    log.append("run.started", job="j", task="t1", run="r1", data={"role": "builder", "mode": "code", "provider": "sim"})
    log.append("run.finished", job="j", task="t1", run="r1",
               data={"verdict": "error", "tokens": None, "usage": "unknown", "reason": f"key {CANARY} {HOSTILE}"})
    log.append("task.state", job="j", task="t1", data={"from": "running", "to": "stopped", "reason": HOSTILE})
    log.append("problem.opened", job="j", task="t1", data={"code": "QWERTY", "kind": "gate_failed",
                                                            "summary": f"{HOSTILE} {CANARY}"})
    log.append("problem.answered", job="j", task="t1", data={"code": "QWERTY", "reply": "hint", "words": HOSTILE,
                                                              "who": f"{HOSTILE}@mail"})
    log.append("review.finished", job="j", task="t1", data={"round": 1, "overall": "CHANGES", "summaries": [HOSTILE]})
    page = tmp_path / "hostile.html"
    outs = [cli("report", "j", "--repo", str(copy), *args) for args in (("--md",), ("--json",), ("--html", str(page)))]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    html = page.read_text()
    for text in [o.stdout for o in outs] + [html]:
        assert CANARY not in text and "\x1b" not in text and "\x07" not in text
    assert "<script" not in html and "<img" not in html and "&lt;script" in html
    assert json.loads(outs[1].stdout)["tasks"][0]["usage"] == "unknown"
    assert "? tokens" in outs[0].stdout  # nothing counted reads as unknown, never as 0
    with chromium(tmp_path) as page_ws:
        seen, asked = _open_offline(page_ws, page, artifacts_dir(tmp_path) / "hostile.png")
    assert not _offline(asked, page), asked
    assert seen["scripts"] == 0 and seen["images"] == 0 and "evil.example/pixel.png" in seen["text"]


def test_an_unknown_job_or_a_missing_folder_is_one_line_naming_the_fix(cli: Any, tmp_path: Path) -> None:
    from pilothouse.core.state.events import EventLog

    copy = tmp_path / "copied"
    EventLog(copy / ".ai/runtime/events.jsonl").append("job.created", job="j")
    for args, said in ((("nope",), "no events of a job named 'nope'"),
                       (("j", "--html", str(tmp_path / "no/such/dir/r.html")), "does not exist"),
                       (("j", "--html", str(tmp_path / "r.html"), "--json"), "drop --html")):
        r = cli("report", *args, "--repo", str(copy))
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _one_job(cli: Any, repo: Path) -> Path:
    """`repo` set up with job j created (its job.created event in the log): the log's path."""
    from pilothouse.core.records.layout import RepoLayout

    assert cli("init", "--gate-fast", "true", "--no-prove", cwd=repo).returncode == 0
    (repo / "req.md").write_text("do a thing\n")
    assert cli("job", "create", "j", "--request-file", "req.md", cwd=repo).returncode == 0
    return RepoLayout(repo).events


def test_report_says_once_the_lines_it_skipped_in_the_words_live_uses(cli: Any, git_repo: Path) -> None:
    events = _one_job(cli, git_repo)
    with open(events, "ab") as fh:
        fh.write(b"garbage\n{\"seq\": 1e999}\n")
    live = [x for x in cli("live", cwd=git_repo).stderr.splitlines() if "skipped" in x]
    for args in (("--md",), ("--json",)):
        r = cli("report", "j", *args, cwd=git_repo)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines() == live and "skipped 2 lines that are not events (first: the line" in live[0]


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_report_on_a_fifo_or_a_directory_log_is_one_line_and_never_waits(git_repo: Path, kind: str) -> None:
    from support import refuses_unusable_log

    refuses_unusable_log(git_repo, kind, "report", "j", "--md")


def test_report_of_a_job_whose_log_is_missing_says_the_log_is_missing(cli: Any, git_repo: Path) -> None:
    events = _one_job(cli, git_repo)
    events.unlink()
    r = cli("report", "j", "--md", cwd=git_repo)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"pilothouse: {events} is missing, but job 'j' exists (.ai/jobs/j.json): the log holds its history and "
        "nothing else does; put the file back (from a backup or a copy) to read the job's story"]
    r = cli("report", "other", "--md", cwd=git_repo)
    assert r.returncode == 2 and "no job named 'other' and no event log yet" in r.stderr


def test_a_repository_not_set_up_is_told_to_run_init_by_report_and_job_list(cli: Any, git_repo: Path) -> None:
    said = f"pilothouse: {git_repo.resolve()} is not set up for pilothouse (no .ai/project.yaml): run `pilothouse init`"
    for argv in (("report", "j", "--md"), ("job", "list"), ("job", "status")):
        r = cli(*argv, cwd=git_repo)
        assert r.returncode == 2 and r.stderr.splitlines() == [said], (argv, r.stderr)
    assert not (git_repo / ".ai").exists()  # asking made nothing
