"""Execute a prepared dispatch: sandbox → (sim) → build → confine → spawn → watch → verdict.

Everything written (events, stderr, report, verdict, latest.log lines) passes through the
redactor built from every configured key, so a key echoed by a model or a CLI never lands on disk.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.core.dispatch.prepare import Prepared, compose_prompt, refuse_line
from pilothouse.core.dispatch.process import ProcOutcome, SignalGuard, WorkerProcess
from pilothouse.core.dispatch.verdict import (
    RunState,
    Work,
    cost_from_tokens,
    decide,
    final_text,
    human_summary,
    started_line,
    verdict_line,
)
from pilothouse.core.state.events import utc_now_iso
from pilothouse.providers import sandbox
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import RunSpec
from pilothouse.providers.untrusted import inert

EventHook = Callable[[Any], None]


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Files:
    """The run's log files, each line redacted before it is written."""

    def __init__(self, logs: sandbox.RunLogs, redact: Any, stream_redactor: Any) -> None:
        self.logs = logs
        self.redact = redact
        self.jsonl = open(logs.jsonl, "a", encoding="utf-8")
        self.stderr = open(logs.stderr, "a", encoding="utf-8")
        self.err_stream = stream_redactor
        for p in (logs.jsonl, logs.stderr):
            os.chmod(p, 0o600)

    def event(self, ev: Any) -> None:
        d = dataclasses.asdict(ev) if dataclasses.is_dataclass(ev) and not isinstance(ev, type) else dict(ev)
        self.jsonl.write(self.redact(json.dumps({"ts": utc_now_iso(), **d}, separators=(",", ":"))) + "\n")
        self.jsonl.flush()

    def stderr_chunk(self, chunk: bytes) -> None:
        self.stderr.write(self.err_stream.feed(chunk.decode("utf-8", "replace")))
        self.stderr.flush()

    def close(self) -> None:
        self.stderr.write(self.err_stream.flush())
        self.jsonl.close()
        self.stderr.close()


def execute(prep: Prepared, on_event: EventHook | None = None,
            emit: Callable[[str], None] = _print_line) -> dict[str, Any]:
    """Run it; emits the started line and returns (and emits) the verdict dict."""
    from pilothouse.providers import confine, keys
    from pilothouse.providers.redact import Redactor, StreamRedactor

    t0 = time.monotonic()
    prov, opts = prep.provider, prep.opts
    redactor = Redactor(prep.secrets)
    label = f"{prov.key}/{prep.run_id}"
    sb = sandbox.make_sandbox(prov.key, prep.run_id, prep.resume_of)
    try:
        sandbox.acquire_lock(sb.root)
    except UserError as exc:  # the original run is still going: leave no half-made resume behind
        link = sandbox.runs_dir(prov.key) / prep.run_id
        if link.is_symlink():
            link.unlink()
        refuse_line(label, str(exc))
        raise
    logs = sandbox.RunLogs(prov.key, prep.run_id)
    sim = None
    try:
        key_file = keys.key_file(prov.key) if prep.key and keys.backend() == "file" else None
        sandbox.link_credential(sb, key_file, prep.key)
        run_json = sb.root / "run.json"
        if not run_json.exists():  # a resume shares the original's sandbox and keeps its record
            sandbox.write_private(run_json, json.dumps({"run_id": prep.run_id, "provider": prov.key,
                                                        "mode": opts.mode, "workdir": str(prep.workdir)}) + "\n")
        task_file = sb.root / "task.md"
        sandbox.write_private(task_file, compose_prompt(opts.mode, prep.task))
        base_url = prov.base_url
        # The builtin worker takes its endpoint on stdin, so for the sim it is started first and
        # boots (another process, another core) while we import and start the sim (~0.1 s of
        # pydantic + YAML); it gets its config once the sim listens.
        deferred = prep.scenario is not None and prov.runner == "builtin"
        extra = {**_project(prep), **opts.extra}
        if prov.runner == "builtin" and prep.scenario is None:
            counting = _counting(prov.key, prep.model)
            if counting:
                extra["counting"] = counting
        # (helper F) under `network: none` the sandbox relays exactly the model's port (providers/
        # netrelay.py), which must be known when the launch is wrapped: no early start then
        if str(extra.get("network", "")).lower() == "none":
            deferred = False
        if prep.scenario is not None and not deferred:
            sim = _sim(prep, sb)
            base_url = sim.start() + "/v1"
        elif deferred:
            base_url = "http://127.0.0.1:9/v1"  # replaced before the worker reads its config
        spec = RunSpec(run_id=prep.run_id, provider=prov, mode=opts.mode, model=prep.model, base_url=base_url,
                       workdir=prep.workdir, sandbox=sb, task_text=prep.task, task_file=task_file,
                       step_cap=prep.step_cap, timeout_s=prep.timeout_s, idle_timeout_s=prep.idle_timeout_s,
                       session_id=prep.session, resume_of=prep.resume_of,
                       extra=extra)
        # a runner with a sandbox of its own (Codex) cannot nest it inside bubblewrap: it asks this
        spec.extra["bwrap"] = not confine.confinement_off(spec) and confine.available()[0]
        if opts.job and getattr(prep.runner, "speaks_mcp", False):
            from pilothouse.core.dispatch.jobcontext import write_job_context

            spec.extra["mcp_worker"] = write_job_context(prep.workdir, opts.job, sb.root)
        launch = confine.prepare(prep.runner.build(spec), spec)
    except BaseException as exc:
        _cleanup(sb, sim)
        if isinstance(exc, UserError):
            message = redactor.redact(str(exc))
            refuse_line(label, message)
            return _refused(prep, logs, message, emit, t0)
        raise
    start = _start_head(prep)  # before the worker can commit anything
    early: WorkerProcess | None = None
    if deferred:
        early = WorkerProcess(launch, defer_stdin=True)
        try:
            sim = _sim(prep, sb)
            spec.base_url = sim.start() + "/v1"
            if early.proc is not None:
                early.feed(prep.runner.build(spec).stdin or b"")
        except BaseException as exc:
            early.kill()
            _cleanup(sb, sim)
            if isinstance(exc, UserError):
                refuse_line(label, redactor.redact(str(exc)))
            raise
    files = _Files(logs, redactor.redact, StreamRedactor(redactor))
    state = RunState()
    started = {"run_id": prep.run_id, "provider": prov.key, "runner": prov.runner, "model": prep.model,
               "mode": opts.mode, "workdir": str(prep.workdir), "log": str(logs.jsonl),
               "latest_log": str(logs.latest), "timeout_s": prep.timeout_s, "idle_timeout_s": prep.idle_timeout_s}
    with SignalGuard() as guard:
        emit(redactor.redact(started_line(started)))
        # (no pydantic prefetch any more: plainly valid results and verdicts need none, see
        # providers/contract_fast.py; a thread importing it would only hold the GIL against us)
        worker = early or WorkerProcess(launch)
        guard.worker = worker
        if guard.received:
            worker.request_abort("interrupted")
        pid = worker.outcome.pid
        sandbox.latest_line(redactor.redact(
            f"{label} pid {pid} START {opts.mode} {prov.runner}/{prep.model} in {prep.workdir}"
            + (f" (resuming {prep.resume_of})" if prep.resume_of else "")))

        def on_stdout(line: str) -> None:
            try:
                events = prep.runner.parse_line(line)
            except Exception as exc:  # a parser bug must not cost the run its verdict
                files.stderr_chunk(f"pilothouse: {prov.runner} parser failed on a line: {exc!r}\n".encode())
                return
            for ev in events:
                state.add(ev)
                files.event(ev)
                if ev.kind == "tool" and ev.status != "started":
                    sandbox.latest_line(redactor.redact(f"{label} pid {pid} {ev.name} {ev.status} {ev.brief}"))
                elif ev.kind == "error":
                    sandbox.latest_line(redactor.redact(f"{label} pid {pid} error({ev.error_class}) {ev.message}"))
                if on_event is not None:
                    on_event(ev)
                if state.steps > prep.step_cap:
                    worker.request_abort(f"step cap: stopped after {prep.step_cap} steps")

        def on_stderr(chunk: bytes) -> None:
            state.add_stderr(chunk)
            files.stderr_chunk(chunk)

        try:
            outcome = worker.watch(on_stdout, on_stderr, prep.timeout_s, prep.idle_timeout_s)
        finally:
            files.close()
            _cleanup(sb, sim)
            _scrub(sb, redactor, f"{label} pid {pid}")
        verdict = _judge(prep, state, outcome, redactor, logs, t0, start)
    try:
        line = redactor.redact(verdict_line(verdict))
    except Exception as exc:  # e.g. a runner reported a value the contract rejects: still answer
        verdict.update(verdict="error", error_class="fatal", result=None,
                       error=f"pilothouse could not build the verdict: {type(exc).__name__}: {exc}"[:500])
        line = redactor.redact(json.dumps({"type": "pilothouse.verdict", "schema": 1, **verdict}, default=str))
    sandbox.write_private(logs.verdict, line + "\n")
    _tell_supervisor()
    marker = "DONE" if verdict["verdict"] in ("completed", "partial") else "FAILED"
    why = f" {verdict['error_class'] or ''}: {verdict['error']}" if verdict.get("error") else \
        (f": {verdict['reason']}" if verdict.get("reason") else "")
    sandbox.latest_line(redactor.redact(f"{label} pid {pid} {marker} {human_summary(verdict)}{why}"))
    emit(line)
    return json.loads(line)


def _refused(prep: Prepared, logs: sandbox.RunLogs, message: str, emit: Callable[[str], None],
             t0: float) -> dict[str, Any]:
    """A run refused before its worker started (e.g. it cannot be confined) still answers with its
    two lines: whoever reads stdout (a script, the supervisor) gets the reason as a verdict rather
    than a process that ended without one."""
    prov, mode = prep.provider, prep.opts.mode
    emit(started_line({"run_id": prep.run_id, "provider": prov.key, "runner": prov.runner, "model": prep.model,
                       "mode": mode, "workdir": str(prep.workdir), "log": str(logs.jsonl),
                       "latest_log": str(logs.latest), "timeout_s": prep.timeout_s,
                       "idle_timeout_s": prep.idle_timeout_s}))
    verdict = {"run_id": prep.run_id, "resume_of": prep.resume_of, "provider": prov.key, "runner": prov.runner,
               "mode": mode, "verdict": "error", "exit_code": None, "step_cap": prep.step_cap,
               "duration_s": round(time.monotonic() - t0, 3), "parse_state": "unavailable",
               "session_id": prep.session, "error_class": "fatal", "error": message[:2000],
               "reason": message.splitlines()[0][:500] if message else None}
    line = verdict_line(verdict)
    sandbox.write_private(logs.verdict, line + "\n")
    _tell_supervisor()
    sys.stderr.write(f"pilothouse: {message}\n")
    sys.stderr.flush()
    emit(line)
    return json.loads(line)


def _tell_supervisor() -> None:
    """A supervisor that spawned this dispatch waits on a pipe for the verdict (core/runs.spawn)."""
    import stat

    from pilothouse.core.dispatch.runs import NOTIFY_ENV

    fd = os.environ.pop(NOTIFY_ENV, None)
    if not fd:
        return
    try:
        if not stat.S_ISFIFO(os.fstat(int(fd)).st_mode):
            return  # not the pipe we were given (a stray variable): write nothing anywhere
        os.write(int(fd), b"v")
        os.close(int(fd))
    except (OSError, ValueError):
        pass  # that supervisor is gone: its successor reads verdict.json when it adopts the run


def _sim(prep: Prepared, sb: Any) -> Any:
    from pilothouse.providers.sim.scenario import grounded_explore
    from pilothouse.providers.sim.server import SimServer, load_scenario

    name = prep.scenario or "explore-basic"
    # the default's answer cites a file of this repository, not the demo's src/calc.py
    scenario = (grounded_explore(Path(prep.workdir)) if name == "explore-basic" else None) or load_scenario(name)
    return SimServer(scenario, api_key=prep.key,
                     served_log=sb.state / "served.jsonl", root=prep.workdir)


def _project(prep: Prepared) -> dict[str, Any]:
    from pilothouse.core.dispatch.prepare import _project_settings

    return _project_settings(prep.workdir)


def _cleanup(sb: Any, sim: Any) -> None:
    sandbox.drop_credential(sb)
    sandbox.release_lock(sb.root)
    if sim is not None:
        # SimServer.stop() waits out serve_forever's poll interval; nobody needs to wait for it
        threading.Thread(target=sim.stop, daemon=True).start()


def _scrub(sb: Any, redactor: Any, label: str) -> None:
    """No raw key at rest in the run folder once the worker is gone (providers/scrub.py)."""
    from pilothouse.providers.scrub import scrub_tree

    specials: list[str] = []

    def skipped(s: Any) -> None:
        if "symbolic link" not in s.why:  # links are never followed, and common in a HOME
            specials.append(s.rel)

    held = scrub_tree(sb.root, redactor, skip=frozenset({sandbox.CREDENTIAL, sandbox.LOCK}), on_skip=skipped)
    if specials:
        sandbox.latest_line(f"{label} left {len(specials)} FIFO(s), device(s) or socket(s) unread in its run "
                            "folder: " + redactor.redact(", ".join(sorted(specials)[:5])))
    if held:
        sandbox.latest_line(f"{label} redacted a key the worker left in {len(held)} file(s) of its run folder: "
                            + redactor.redact(", ".join(sorted(held)[:5])))


def _start_head(prep: Prepared) -> str | None:
    """The workdir's commit before a code run, to tell what the run itself changed."""
    if prep.opts.mode not in ("code", "resume"):
        return None
    from pilothouse.core.git.checkout import head
    from pilothouse.core.git.worktrees import GitError

    try:
        return head(prep.workdir)
    except (GitError, OSError):
        return None  # not a git checkout (or no commit yet): the claims stay unchecked


def _work(prep: Prepared, start: str | None) -> Work:
    if prep.opts.mode == "explore":
        return Work(root=str(prep.workdir))
    if start is None:
        return Work()
    from pilothouse.core.git.checkout import changed_files
    from pilothouse.core.git.worktrees import GitError

    try:
        # committed since the start (a builder told not to commit may still have) and uncommitted
        return Work(changed=changed_files(prep.workdir, start, uncommitted=True))
    except (GitError, OSError):
        return Work()


def _judge(prep: Prepared, state: RunState, out: ProcOutcome, redactor: Any, logs: sandbox.RunLogs,
           t0: float, start: str | None = None) -> dict[str, Any]:
    prov, mode = prep.provider, prep.opts.mode
    text = final_text(state, prep.runner)
    d = decide(state, out, mode, text, prep.step_cap, _work(prep, start))
    # the report is the worker's words for the operator to read (`cat`, a pager, the cockpit): inert
    sandbox.write_private(logs.report, inert(redactor.redact(text or "(the worker produced no text)\n")))
    cost: float | None = state.cost or cost_from_tokens(state.tokens, getattr(prov, "cost", None))
    usage = state.usage
    tokens: dict[str, int] | None = state.tokens
    if usage == "unknown":  # never a count of 0 for tokens nobody counted (providers/usage.py)
        cost = None
        tokens = state.tokens if any(state.tokens.values()) else None
    tail = state.stderr_tail.decode("utf-8", "replace")[-2000:]
    return {
        "run_id": prep.run_id, "resume_of": prep.resume_of, "provider": prov.key, "runner": prov.runner,
        "mode": mode, "verdict": d["verdict"], "exit_code": out.exit_code, "timed_out": out.timed_out,
        "idle_timed_out": out.idle_timed_out, "interrupted": out.interrupted, "steps": state.steps,
        "step_cap": prep.step_cap, "duration_s": round(time.monotonic() - t0, 3), "tokens": tokens,
        "cost_usd": cost, "usage": usage, "tool_errors": {"permission_denied": state.denied, "other": state.tool_other},
        "parse_state": d["parse_state"], "parse_error": d["parse_error"], "result": d["result"],
        "final_text_path": str(logs.report), "session_id": state.session_id or prep.session,
        "stderr_tail": redactor.redact(tail), "error_class": d["error_class"],
        "error": redactor.redact(d["error"]) if d["error"] else None, "quota": state.quota,
        "reason": redactor.redact(d["reason"]) if d["reason"] else None,
    }


def _counting(provider: str, model: str) -> dict[str, Any] | None:
    """How the capability probe found this server's turns can be counted when its stream reports
    no usage (providers/capabilities.py `counting`); None when it was not probed or need not be."""
    from pilothouse.providers import capability_store

    try:
        caps = capability_store.get(provider, model)
    except Exception:  # noqa: BLE001 - an unreadable probe record only costs the count's precision
        return None
    found = (caps or {}).get("counting")
    return found if isinstance(found, dict) else None
