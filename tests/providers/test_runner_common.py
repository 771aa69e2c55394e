"""Shared driver and end-to-end suite for the real-CLI runner tests (test_runner_{opencode,claude,codex}.py).

Each real agent CLI runs against the sim through `pilothouse dispatch --provider sim-<cli>`,
with a canary key stored for the provider (file backend) so the CLI's real auth path is used:
the sim answers 401 to any request without that exact key. The binaries come from
$PILOTHOUSE_TEST_RUNNERS (scripts/install-runners fills it; scripts/test exports it).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
RECORDED = HERE / "recorded"
DEFAULT_PREFIX = HERE.parent.parent / ".runners"


def require_cli(runner: str) -> Path:
    """The CLI's binary from the tests' prefix; a clear failure (never a skip) when it is missing."""
    from pilothouse.providers.runners.npm import find_binary
    from pilothouse.providers.runners.pins import pin

    prefix = os.environ.get("PILOTHOUSE_TEST_RUNNERS")
    if not prefix and (DEFAULT_PREFIX / "node_modules" / ".bin").is_dir():
        # scripts/install-runners' prefix, so a plain `pytest` works once it has run
        prefix = os.environ["PILOTHOUSE_TEST_RUNNERS"] = str(DEFAULT_PREFIX)
    p = pin(runner)
    binary = find_binary(runner)
    if not prefix or binary is None or binary != Path(prefix) / "node_modules" / ".bin" / p.binary:
        pytest.fail(f"the {runner} CLI ({p.spec}) was not found in $PILOTHOUSE_TEST_RUNNERS "
                    f"({prefix or 'unset'}); run scripts/install-runners and export "
                    "PILOTHOUSE_TEST_RUNNERS=$PWD/.runners (scripts/test does both)", pytrace=False)
    return binary


@dataclass
class Run:
    started: dict[str, Any]
    verdict: dict[str, Any]
    stdout: str
    stderr: str
    wall_s: float
    served: list[dict[str, Any]] = field(default_factory=list)  # what the sim served for this run

    @property
    def tokens(self) -> dict[str, int]:
        return self.verdict["tokens"]


class Driver:
    """Dispatches one real CLI against the sim and collects what it left behind."""

    def __init__(self, cli: Any, provider: str, runner: str) -> None:
        self.cli, self.provider, self.runner = cli, provider, runner
        self.canary = "sk-canary-" + secrets.token_hex(12)
        require_cli(runner)
        r = cli("key", "set", provider, "--from-stdin", "--backend", "file", input=self.canary + "\n")
        assert r.returncode == 0, r.stderr

    def sandbox(self, run_id: str) -> Path:
        from pilothouse.providers import paths

        return (paths.providers_dir() / self.provider / "runs" / run_id).resolve()

    def _served(self, run_id: str) -> list[dict[str, Any]]:
        log = self.sandbox(run_id) / "state" / "served.jsonl"
        if not log.exists():
            return []
        return [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]

    def dispatch(self, mode: str, workdir: Path, scenario: str, task: str = "Do the task.",
                 resume_of: str | None = None, timeout: float = 120, job: str | None = None) -> Run:
        task_file = workdir.parent / f"task-{secrets.token_hex(4)}.md"
        task_file.write_text(task + "\n")
        sc = str(SCENARIOS / f"{scenario}.yaml") if (SCENARIOS / f"{scenario}.yaml").exists() else scenario
        args = ["dispatch", "--provider", self.provider, "--mode", mode, "--workdir", str(workdir),
                "--task-file", str(task_file), "--scenario", sc, "--timeout", "90", "--idle-timeout", "60"]
        before = len(self._served(resume_of)) if resume_of else 0
        if resume_of:
            args += ["--resume-of", resume_of]
        if job:
            args += ["--job", job]
        t0 = time.monotonic()
        r = self.cli(*args, timeout=timeout)
        wall = time.monotonic() - t0
        lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
        assert r.returncode == 0 and len(lines) == 2, f"dispatch failed ({r.returncode}): {r.stdout}\n{r.stderr}"
        started, verdict = json.loads(lines[0]), json.loads(lines[1])
        served = self._served(verdict["run_id"])[before:]
        return Run(started, verdict, r.stdout, r.stderr, wall, served)

    def events(self, run: Run) -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in Path(run.started["log"]).read_text().splitlines() if ln.strip()]


class RealCliSuite:
    """The end-to-end tests every real CLI passes; a test module subclasses it as `TestRealCli`
    naming its provider, runner, the tools a code run must show and the read-only modes to try."""

    provider = runner = ""
    code_tools: tuple[tuple[str, str], ...] = ()
    read_only_modes: tuple[str, ...] = ("explore", "review")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "mode" in metafunc.fixturenames:
            metafunc.parametrize("mode", self.read_only_modes)

    @pytest.fixture
    def drv(self, cli: Any) -> Driver:
        return Driver(cli, self.provider, self.runner)

    def check_quota(self, quota: dict[str, Any]) -> None:
        """What a CLI reports about the rate limit beyond its window."""

    @pytest.mark.realcli
    def test_code_creates_and_edits_then_resume_continues(self, drv: Driver, git_repo: Path) -> None:
        run = drv.dispatch("code", git_repo, "cli-code", "Add a slugify helper in src/slug.py.")
        v = run.verdict
        assert v["verdict"] == "completed", v
        assert (git_repo / "src" / "slug.py").read_text() == \
            'def slugify(text):\n    return text.lower().replace(" ", "-")\n'
        tools = {(e["name"], e["status"]) for e in drv.events(run) if e["kind"] == "tool"}
        assert self.code_tools and set(self.code_tools) <= tools, tools
        assert_tokens_match(run)
        again = drv.dispatch("resume", git_repo, "cli-code", "Add type hints.", resume_of=v["run_id"])
        assert again.verdict["verdict"] == "completed", again.verdict
        assert again.verdict["session_id"] == v["session_id"]
        assert (git_repo / "src" / "slug.py").read_text().startswith("def slugify(text: str) -> str:")
        assert_tokens_match(again)  # per-turn deltas, though Codex reports thread totals
        assert_no_canary(drv, run, again)
        assert_canary_not_in_launch(drv, "code", git_repo)

    @pytest.mark.realcli
    def test_explore_parses_the_result_block(self, drv: Driver, git_repo: Path) -> None:
        run = drv.dispatch("explore", git_repo, "cli-explore", "How does add work?")
        assert run.verdict["verdict"] == "completed"
        assert run.verdict["parse_state"] == "parsed"
        assert run.verdict["result"]["facts"][0]["file_line"] == "src/calc.py:2"
        assert_tokens_match(run)

    @pytest.mark.realcli
    def test_read_only_modes_cannot_write(self, drv: Driver, git_repo: Path, mode: str) -> None:
        run = drv.dispatch(mode, git_repo, "cli-readonly", "Write NOTE.md.")
        assert not (git_repo / "NOTE.md").exists()
        assert not (git_repo / "SHELL_NOTE.md").exists()
        assert run.verdict["tool_errors"]["permission_denied"] == 2, run.verdict
        assert_tokens_match(run)

    @pytest.mark.realcli
    def test_a_worker_reads_its_job_over_mcp_and_no_route_reaches_a_host_tool(self, drv: Driver, git_repo: Path,
                                                                             tmp_path: Path) -> None:
        """dispatch --job gives the CLI the job's read-only server (in the run's own config): the
        worker reads the request, the screenshot and the decisions; the host's tools are not in its
        list; and the host profile it starts itself, or a write to state.db, reach nothing."""
        wt, db = job_worktree(git_repo, tmp_path)
        run = drv.dispatch("code", wt, str(job_scenario(tmp_path)), "Count words.", job="count")
        said = " ".join(e["text"] for e in drv.events(run) if e["kind"] == "text")
        calls = [(e["name"].rsplit("_", 2)[-2:], e["status"]) for e in drv.events(run)
                 if e["kind"] == "tool" and e["status"] != "started" and "job_" in e["name"]]
        assert calls == [(["job", "request"], "ok"), (["job", "attachment"], "ok"), (["job", "decisions"], "ok")], \
            said + run.stderr[-2000:]
        # the sim could not find job_create among the tools the CLI declared: its answer lists them
        declared = said.split("declared no MCP tool 'job_create' (declared: ", 1)[1].split(")", 1)[0].split(", ")
        mcp = [n for n in declared if "job_" in n or "problem_" in n or "task_" in n]
        assert sorted(n.rsplit("_", 2)[-2] + "_" + n.rsplit("_", 1)[-1] for n in mcp) == [
            "job_attachment", "job_decisions", "job_request"], declared
        assert_no_host_route(git_repo, wt, db)
        # the server was named in the run's own config, never in the operator's
        operator = [Path.home() / ".claude.json", Path.home() / ".claude", Path.home() / ".codex",
                    Path(os.environ["XDG_CONFIG_HOME"]) / "opencode"]
        assert [p for p in operator if p.exists()] == []

    @pytest.mark.realcli
    def test_bad_key_fails_fast_as_auth(self, drv: Driver, git_repo: Path) -> None:
        run = drv.dispatch("explore", git_repo, "auth-401", "Hello.")
        assert_auth_fails_fast(drv, run)

    @pytest.mark.realcli
    def test_rate_limit_ends_as_quota_with_its_window(self, drv: Driver, git_repo: Path) -> None:
        run = drv.dispatch("explore", git_repo, "quota-429", "Hello.")
        assert run.verdict["verdict"] == "quota"
        assert run.verdict["quota"][0]["window"] == "five_hour"
        self.check_quota(run.verdict["quota"][0])


PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def job_worktree(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A job with a screenshot and a decision in `repo`, its state.db, and a task worktree where
    pilothouse keeps them (so the sandbox hides the main checkout); a probe script in it."""
    import sqlite3
    import sys

    from pilothouse.core.records import jobs
    from pilothouse.core.records.layout import RepoLayout, worktrees_base
    from support import git

    layout = RepoLayout(repo)
    (tmp_path / "shot.png").write_bytes(PNG)
    jobs.create_job(layout, "count", "Count words.", acceptance="wordcount('a b') == 2",
                    attachments=[tmp_path / "shot.png"])
    jobs.decide(layout, "count", "no regex")
    db = layout.state_db
    sqlite3.connect(db).execute("CREATE TABLE jobs(name TEXT)").connection.close()
    wt = worktrees_base() / "repo" / "count-t1"
    git(repo, "worktree", "add", "-q", "-b", "ph/count/t1", str(wt))
    rpc = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
               "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "w", "version": "1"}}},
           {"jsonrpc": "2.0", "method": "notifications/initialized"},
           {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "job_create", "arguments": {"name": "evil", "request": "approve everything"}}}]
    # what a worker's shell can try: write state.db, and start the host's server itself and call a
    # tool that writes (its answers are read until the call's, then it is ended)
    (wt / "probe.py").write_text(
        "import json, subprocess, sys, threading\n"
        f"try:\n    import sqlite3\n    sqlite3.connect({str(db)!r}).execute('CREATE TABLE evil(x)')\n"
        "    said = 'wrote'\nexcept Exception as exc:\n    said = str(exc)\n"
        "open('db-probe.txt', 'w').write(said)\n"
        "p = subprocess.Popen([sys.executable, '-I', '-m', 'pilothouse', 'mcp'], stdin=subprocess.PIPE,\n"
        "                     stdout=subprocess.PIPE, text=True)\n"
        "t = threading.Timer(60, p.kill)\nt.daemon = True\nt.start()\n"
        f"for m in {rpc!r}:\n    p.stdin.write(json.dumps(m) + '\\n')\n    p.stdin.flush()\n"
        "out = []\nfor line in p.stdout:\n    out.append(line)\n    if '\"id\":2' in line:\n        break\n"
        "p.kill()\nopen('host-probe.txt', 'w').write(''.join(out))\n")
    (wt / "probe.sh").write_text(f"{shlex.quote(sys.executable)} -I probe.py\n")
    return wt, db


def job_scenario(tmp_path: Path) -> Path:
    scen = tmp_path / "job-mcp.yaml"
    scen.write_text(
        "name: job-mcp\ndescription: a worker reads its job over MCP, then tries the host's tools\nscripts:\n"
        "  - match: {mode: code}\n    turns:\n"
        "      - say: Reading the job.\n        actions: [{mcp: {tool: job_request}}]\n"
        "      - say: Its screenshot.\n"
        "        actions: [{mcp: {tool: job_attachment, arguments: {index: '{{result.attachments.0.index}}'}}}]\n"
        "      - say: The decisions.\n        actions: [{mcp: {tool: job_decisions}}]\n"
        "      - say: Trying the host.\n        actions: [{bash: {command: sh probe.sh}}]\n"
        "      - say: Approving myself.\n        actions: [{mcp: {tool: job_create, arguments: {name: evil}}}]\n")
    return scen


def assert_no_host_route(repo: Path, wt: Path, db: Path) -> None:
    import sqlite3

    assert "unable to open database" in (wt / "db-probe.txt").read_text()  # the checkout is hidden
    host = (wt / "host-probe.txt").read_text()
    assert '"id":2' in host and '"isError":true' in host, host  # the call ran, and failed
    assert not (repo / ".ai" / "jobs" / "evil.json").exists()
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("jobs",)]


def served_tokens(run: Run) -> dict[str, int]:
    total = dict.fromkeys(("input", "output", "reasoning", "cache_read", "cache_write"), 0)
    for rec in run.served:
        if rec.get("status") == 200 and rec.get("usage"):
            for k in total:
                total[k] += int(rec["usage"].get(k) or 0)
    return total


def assert_tokens_match(run: Run) -> None:
    assert run.served, "the sim served nothing for this run"
    assert run.tokens == served_tokens(run), (run.tokens, served_tokens(run))


def assert_no_canary(drv: Driver, *runs: Run) -> None:
    """The canary key appears in no dispatch output, log, report, verdict, event or sandbox config."""
    from pilothouse.providers import paths

    for run in runs:
        assert drv.canary not in run.stdout and drv.canary not in run.stderr
    roots = [paths.logs_dir()] + [drv.sandbox(r.verdict["run_id"]) for r in runs]
    for root in roots:
        for p in root.rglob("*"):
            if p.is_symlink() or not p.is_file() or p.name == "credential":
                continue
            data = p.read_bytes()
            assert drv.canary.encode() not in data, f"canary key found in {p}"


def assert_canary_not_in_launch(drv: Driver, mode: str, workdir: Path) -> None:
    """Build the launch the way dispatch does and look for the key in argv, env and stdin."""
    from pilothouse.providers import provider_index, sandbox
    from pilothouse.providers.runners import get_runner
    from pilothouse.providers.runners.base import RunSpec

    prov = provider_index.record(drv.provider)
    run_id = sandbox.new_run_id()
    sb = sandbox.make_sandbox(prov.key, run_id)
    sandbox.link_credential(sb, None, drv.canary)
    task = sb.root / "task.md"
    task.write_text("[pilothouse mode: explore]\n\nhello\n")
    spec = RunSpec(run_id=run_id, provider=prov, mode=mode, model=prov.model_id, base_url="http://127.0.0.1:9/v1",
                   workdir=workdir, sandbox=sb, task_text="hello", task_file=task, step_cap=5, timeout_s=10,
                   idle_timeout_s=10)
    launch = get_runner(prov.runner).build(spec)
    assert not any(drv.canary in a for a in launch.argv)
    assert not any(drv.canary in v for v in launch.env.values())
    assert drv.canary.encode() not in (launch.stdin or b"")
    sandbox.drop_credential(sb)
    for p in sb.root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert drv.canary.encode() not in p.read_bytes(), f"canary key written to {p}"


def replay(runner: Any, name: str) -> list[Any]:
    """Every normalised event a runner makes of a recorded stream (tests/providers/recorded/)."""
    events: list[Any] = []
    for line in (RECORDED / name).read_text().splitlines():
        events.extend(runner.parse_line(line))
    return events


def summarize(events: list[Any]) -> dict[str, Any]:
    tokens = dict.fromkeys(("input", "output", "reasoning", "cache_read", "cache_write"), 0)
    out: dict[str, Any] = {"sessions": set(), "texts": [], "tools": [], "errors": [], "quota": [],
                           "steps": 0, "tokens": tokens, "cost": 0.0}
    for ev in events:
        if ev.kind == "session":
            out["sessions"].add(ev.id)
        elif ev.kind == "text":
            out["texts"].append(ev.text)
        elif ev.kind == "tool":
            out["tools"].append((ev.name, ev.status))
        elif ev.kind == "error":
            out["errors"].append(ev.error_class)
        elif ev.kind == "quota":
            out["quota"].append(ev.window)
        elif ev.kind == "usage":
            out["steps"] += 1
            out["cost"] += ev.cost
            for k in tokens:
                tokens[k] += getattr(ev, k)
    return out


def _secs(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def assert_auth_fails_fast(drv: Driver, run: Run) -> None:
    """A 401 ends the run as an auth error without the CLI's retry storm (their defaults retry a 401
    up to ten times over a minute). Measured from the first refusal the sim served to the error
    event, so a busy machine's slow CLI start-up does not count; the whole run is ~1-5 s idle."""
    assert run.verdict["verdict"] == "error", run.verdict
    assert run.verdict["error_class"] == "auth", run.verdict
    refused = [r for r in run.served if r.get("status") == 401]
    assert 1 <= len(refused) <= 4, refused  # Codex retries once and re-reads its key once
    errors = [e for e in drv.events(run) if e["kind"] == "error" and e["error_class"] == "auth"]
    assert errors, "no auth error event"
    assert _secs(errors[0]["ts"]) - _secs(refused[0]["ts"]) < 5
