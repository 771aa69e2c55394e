"""`pilothouse report JOB`: a real demo job's story as JSON that agrees with `job status` and `usage`,
as Markdown, and as one HTML page that the real Chromium opens offline, drawing the timeline and
loading nothing; a log from elsewhere with hostile text and an unredacted key shows neither."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from datetime import datetime
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


def _run(at: float, kind: str, task: str | None, run: str, **data: Any) -> tuple[float, str, dict[str, Any]]:
    return (at, kind, {"task": task, "run": run, "data": data})


def _priced_job(t0: float) -> list[tuple[float | str, str, dict[str, Any]]]:
    """A job whose planner and task `sim-task` ran on the simulator, task `paid` on a priced provider and
    task `mixed` on both; `paid`'s gate counted a skipped test."""
    lines: list[tuple[float | str, str, dict[str, Any]]] = [(t0, "job.created", {})]
    lines.append(_run(t0 + 1, "run.started", None, "plan", role="assigner", mode="plan", provider="sim", attempt=1))
    lines.append(_run(t0 + 2, "run.finished", None, "plan", verdict="completed", tokens=100, cost_usd=0.0))
    for n, (task, providers) in enumerate((("sim-task", ["sim"]), ("paid", ["claude"]),
                                           ("mixed", ["sim", "claude"]))):
        at = t0 + 3 + 10 * n
        lines.append((at, "task.state", {"task": task, "data": {"from": "ready", "to": "running"}}))
        for k, provider in enumerate(providers):
            run = f"{task}-{k}"
            lines.append(_run(at + 1 + 3 * k, "run.started", task, run, role="builder", mode="code" if not k else "resume",
                              provider=provider, attempt=1))
            lines.append(_run(at + 2 + 3 * k, "run.finished", task, run, verdict="completed", tokens=50,
                              cost_usd=0.0 if provider == "sim" else 0.0125))
        lines.append((at + 8, "gate.started", {"task": task, "data": {"level": "fast", "where": "worktree"}}))
        lines.append((at + 9, "gate.finished", {"task": task, "data": {
            "level": "fast", "where": "worktree", "passed": True, "duration_s": 0.5,
            "counts": {"collected": 6, "passed": 4 if task == "paid" else 6, "failed": 1 if task == "paid" else 0,
                       "skipped": 1 if task == "paid" else 0, "errors": 0, "source": "junit"}}}))
    return lines


def test_every_gates_counts_say_its_skipped_tests_and_every_cost_of_the_simulator_says_so(
        cli: Any, tmp_path: Path) -> None:
    import time

    from support import write_log

    copy = tmp_path / "copied"
    write_log(copy / ".ai/runtime/events.jsonl", _priced_job(round(time.time()) - 600))
    md = cli("report", "j", "--repo", str(copy), "--md")
    assert md.returncode == 0, md.stderr
    gates = [line for line in md.stdout.splitlines() if "| fast | worktree |" in line]
    assert [line.split(" | ")[5] for line in gates] == [
        "6 tests: 6 passed, 0 failed, 0 skipped" if "paid" not in line else "6 tests: 4 passed, 1 failed, 1 skipped"
        for line in gates] and len(gates) == 3
    cells = [line.strip("| ").split(" | ") for line in md.stdout.splitlines() if line.startswith("| ")]
    rows = {row[0]: row[-1] for row in cells if row[-1].startswith("$")}  # every table's cost column
    assert rows == {"sim-task": "$0.0000 (simulator)", "paid": "$0.0125 (measured)",
                    "mixed": "$0.0125 (measured, part simulator)", "planner": "$0.0000 (simulator)",
                    "builders": "$0.0125 (measured, part simulator)", "resumes": "$0.0125 (measured)",
                    "sim (simulator)": "$0.0000 (simulator)", "claude": "$0.0250 (measured)"}
    assert "cost: $0.0250 (measured, part simulator)" in md.stdout  # the total, as it always said
    model = json.loads(cli("report", "j", "--repo", str(copy), "--json").stdout)
    assert {t["task"]: t["cost_label"] for t in model["tasks"]} == {
        "sim-task": "simulator", "paid": "measured", "mixed": "measured, part simulator"}
    assert [(r["role"], r["cost_label"]) for r in model["by_role"]] == [
        ("planner", "simulator"), ("builders", "measured, part simulator"), ("resumes", "measured")]
    replay = json.loads(cli("replay", "j", "--repo", str(copy), "--json").stdout)
    assert [t["cost_label"] for t in replay["tasks"]] == [t["cost_label"] for t in model["tasks"]]


@pytest.mark.parametrize("where", ["last", "first", "middle"])
def test_a_stamp_in_year_9999_or_out_of_the_logs_order_never_becomes_the_jobs_start_or_end(
        cli: Any, tmp_path: Path, where: str) -> None:
    import time

    from support import stamp, write_log

    t0 = round(time.time()) - 600
    lines = _priced_job(t0)
    start, end = stamp(lines[0][0]), stamp(lines[-1][0])  # type: ignore[arg-type]
    hostile: tuple[float | str, str, dict[str, Any]] = (
        "9999-12-31T23:59:59.999Z", "task.state", {"task": "paid", "data": {"from": "running", "to": "stopped",
                                                                            "reason": "forged"}})
    stray = (lines[10][0] + 3600, "review.finished", {"task": "paid", "data": {"round": 1, "overall": "PASS"}})
    if where == "last":
        lines.append(hostile)
    elif where == "first":
        lines.insert(1, hostile)
    else:  # one in year 9999, one an hour ahead of the lines after it, one in 2001 among them
        lines[12:12] = [hostile, stray, ("2001-01-01T00:00:00.000Z", "review.finished", {"task": "mixed"})]
    copy = tmp_path / "copied"
    write_log(copy / ".ai/runtime/events.jsonl", lines)
    model = json.loads(cli("report", "j", "--repo", str(copy), "--json").stdout)
    state = json.loads(cli("replay", "j", "--repo", str(copy), "--json").stdout)
    iso = [datetime.fromisoformat(x.replace("Z", "+00:00")) for x in (start, end)]
    assert [datetime.fromisoformat(model[k]) for k in ("start", "end")] == iso
    assert [datetime.fromisoformat(state[k]) for k in ("start", "end")] == iso
    assert state["at"] == state["end"]  # the default moment, the end, is the job's: not year 9999
    md = cli("report", "j", "--repo", str(copy), "--md")
    assert md.returncode == 0 and "(9999" not in md.stdout and "9999-12-31" not in md.stdout, md.stderr
    assert all(datetime.fromisoformat(b["start"]) <= iso[1] for lane in model["lanes"] for b in lane["bars"])


def test_a_log_whose_every_stamp_is_past_tomorrow_is_one_line_from_replay_and_an_empty_report(
        cli: Any, tmp_path: Path) -> None:
    from support import write_log

    copy = tmp_path / "copied"
    write_log(copy / ".ai/runtime/events.jsonl", [("9999-12-31T23:59:59.999Z", "job.created", {}),
                                                 ("9999-12-31T23:59:59.999Z", "job.state", {"data": {"state": "x"}})])
    r = cli("replay", "j", "--repo", str(copy), "--json")
    assert r.returncode == 2 and not r.stdout and len(r.stderr.splitlines()) == 1, r.stderr
    assert "has a time to replay it at" in r.stderr and "hours past this machine's clock" in r.stderr
    r = cli("report", "j", "--repo", str(copy), "--md")
    assert r.returncode == 0 and "from — to — (—)" in r.stdout, r.stderr
