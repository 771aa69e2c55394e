"""fanout: several dispatches at once, bounded, one JSON array of verdicts.

Each job runs as its own `pilothouse dispatch` process, so each keeps the full dispatch
guarantees (own signal handling, own verdict file) and one crashing cannot take the others
down. A job that ends without a verdict line gets a synthesized `error` verdict.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pilothouse.providers.errors import UserError
from pilothouse.providers.hostpython import host_env, python_argv

_FLAGS = {"provider": "--provider", "mode": "--mode", "workdir": "--workdir", "task_file": "--task-file",
          "run_id": "--run-id", "scenario": "--scenario", "model": "--model", "step_cap": "--step-cap",
          "timeout": "--timeout", "idle_timeout": "--idle-timeout", "session": "--session",
          "resume_of": "--resume-of"}


def load_jobs(path: str) -> list[dict[str, Any]]:
    from pilothouse.providers.userfile import read_text

    p = Path(path)
    try:
        jobs = json.loads(read_text(p, f"jobs file {p}"))
    except FileNotFoundError:
        raise UserError(f"jobs file {p} does not exist") from None
    except ValueError as exc:
        raise UserError(f"{p} is not valid JSON ({exc}); it must be an array of job objects") from None
    if not isinstance(jobs, list) or not jobs:
        raise UserError(f"{p} must be a non-empty JSON array of job objects")
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise UserError(f"{p}: job [{i}] is not an object")
        unknown = set(job) - set(_FLAGS) - {"task"}
        if unknown:
            raise UserError(f"{p}: job [{i}] has unknown key '{sorted(unknown)[0]}' (allowed: "
                            f"{', '.join([*_FLAGS, 'task'])})")
        for need in ("provider", "mode", "workdir"):
            if need not in job:
                raise UserError(f"{p}: job [{i}] is missing '{need}'")
        if "task" not in job and "task_file" not in job:
            raise UserError(f"{p}: job [{i}] needs 'task_file' (or inline 'task')")
    return jobs


def _synth(job: dict[str, Any], message: str, rc: int | None) -> dict[str, Any]:
    return {"type": "pilothouse.verdict", "schema": 1, "run_id": job.get("run_id"), "resume_of": job.get("resume_of"),
            "provider": job.get("provider"), "runner": None, "mode": job.get("mode"), "verdict": "error",
            "exit_code": rc, "timed_out": False, "idle_timed_out": False, "interrupted": False, "steps": 0,
            "step_cap": job.get("step_cap") or 0, "duration_s": 0.0,
            "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0, "cache_write": 0},
            "cost_usd": 0.0, "tool_errors": {"permission_denied": 0, "other": 0}, "parse_state": "unavailable",
            "parse_error": None, "result": None, "final_text_path": None, "session_id": None, "stderr_tail": "",
            "error_class": "fatal", "error": message, "synthesized": True}


def fanout(jobs: list[dict[str, Any]], max_parallel: int = 4) -> list[dict[str, Any]]:
    procs: dict[int, subprocess.Popen[str]] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def one(i: int) -> dict[str, Any]:
        job = jobs[i]
        if stopping.is_set():
            return _synth(job, "not started: fanout was interrupted", None)
        tmp = None
        if "task" in job and "task_file" not in job:
            fd, tmp = tempfile.mkstemp(prefix="pilothouse-task-", suffix=".md")  # 0600
            with os.fdopen(fd, "w") as fh:
                fh.write(str(job["task"]))
        argv = python_argv("-m", "pilothouse", "dispatch")
        for k, flag in _FLAGS.items():
            if job.get(k) is not None:
                argv += [flag, str(job[k])]
        if tmp:
            argv += ["--task-file", tmp]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, env=host_env())
            with lock:
                procs[i] = proc
            out, err = proc.communicate()
        finally:
            if tmp:
                os.unlink(tmp)
        from pilothouse.core.dispatch.runs import last_verdict

        found = last_verdict(out.splitlines())
        if found is not None:
            return found
        last = (err.strip().splitlines() or ["no output"])[-1]
        return _synth(job, f"dispatch ended without a verdict (exit {proc.returncode}): {last}", proc.returncode)

    def stop(signum: int, frame: Any) -> None:
        stopping.set()
        with lock:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)  # each dispatch aborts its worker and still answers

    old = None
    if threading.current_thread() is threading.main_thread():
        old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(max_workers=max_parallel) as pool:
            return list(pool.map(one, range(len(jobs))))
    finally:
        for s, h in (old or {}).items():
            signal.signal(s, h)
