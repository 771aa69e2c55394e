"""Worker runs the supervisor launches: recording, spawning, adopting, reading verdicts and logs.

A launch is recorded in the `runs` table *before* the dispatch is spawned, with the run id the
dispatch is told to use (`--run-id`), so a supervisor that dies at any point can tell, when it
comes back, whether that run is still alive (pid + start time from /proc), finished meanwhile
(its verdict.json), or never started (no process carries the run id) and must be spawned now.
Dispatches run in their own session so they outlive the supervisor.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.events import EventLog, utc_now_iso
from pilothouse.providers.sandbox import (
    new_run_id as new_run_id,  # one run-id format for dispatch and supervisor
)

if TYPE_CHECKING:
    import sqlite3  # a dispatch imports this module for its paths and never opens the store


def pid_start(pid: int) -> str | None:
    """The process start time (clock ticks since boot, field 22 of /proc/<pid>/stat)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def process_matches(pid: int | None, start: str | None) -> bool:
    """True when `pid` is alive and is the same process we recorded (not a reused pid)."""
    if not pid:
        return False
    now = pid_start(pid)
    if now is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
        if state[state.rfind(")") + 2:].split()[0] == "Z":
            return False  # exited, waiting to be reaped
    except OSError:
        return False
    return start is None or now == start


def find_dispatch_pid(run_id: str) -> int | None:
    """A live process whose command line carries `--run-id <run_id>` (a spawn we did not record)."""
    needle = b"\0--run-id\0" + run_id.encode() + b"\0"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if needle in b"\0" + cmdline and process_matches(int(entry.name), None):
            return int(entry.name)
    return None


def wait_gone(pid: int, start: str | None, timeout: float) -> bool:
    """Whether process `pid` (started at `start`) is gone within `timeout` seconds (woken by its pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        deadline = time.monotonic() + timeout
        while process_matches(pid, start):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([fd], [], [], min(left, 0.5))
            try:
                os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our child
            except ChildProcessError:
                pass
        return True
    finally:
        os.close(fd)


NOTIFY_ENV = "PILOTHOUSE_NOTIFY_FD"
# an SQL condition on `runs`: not a run `maintain repair` rebuilt from the event log (its verdict
# holds what run.finished said, never the result a planning or review step acts on)
NOT_REBUILT = "(CASE WHEN json_valid(verdict) THEN json_extract(verdict, '$.rebuilt') END) IS NOT 1"


@dataclass
class Launch:
    """Everything needed to (re)spawn one dispatch; stored in the runs row as `spec`."""

    run_id: str
    job: str | None
    task: str | None
    role: str  # builder|reviewer|assigner
    provider: str
    mode: str
    workdir: str
    task_text: str
    attempt: int = 0
    model: str | None = None
    session_id: str | None = None
    resume_of: str | None = None
    scenario: str | None = None
    executor: str = "local"  # where it runs (core/executor/): a restarted supervisor adopts it there


def run_files(layout: RepoLayout, run_id: str) -> dict[str, Path]:
    base = layout.runtime / "runs"
    return {"task": base / f"{run_id}.task.md", "out": base / f"{run_id}.out",
            "err": base / f"{run_id}.err", "spec": base / f"{run_id}.spec.json"}


def provider_logs(provider: str, run_id: str) -> dict[str, Path]:
    from pilothouse.providers.paths import logs_dir

    base = logs_dir() / provider
    return {"jsonl": base / f"{run_id}.jsonl", "verdict": base / f"{run_id}.verdict.json",
            "report": base / f"{run_id}.report.md", "stderr": base / f"{run_id}.stderr.log"}


def record_sql(launch: Launch) -> tuple[str, tuple[Any, ...]]:
    """The INSERT that records a launch; callers run it in the same transaction as the task's state."""
    log = str(provider_logs(launch.provider, launch.run_id)["jsonl"])
    return ("INSERT OR IGNORE INTO runs(run_id, job, task, role, provider, model, mode, attempt, state, log,"
            " started_at) VALUES (?,?,?,?,?,?,?,?, 'running', ?, ?)",
            (launch.run_id, launch.job, launch.task, launch.role, launch.provider, launch.model, launch.mode,
             launch.attempt, log, utc_now_iso()))


def write_spec(layout: RepoLayout, launch: Launch) -> None:
    from pilothouse.providers.fsutil import atomic_write_json, atomic_write_text

    files = run_files(layout, launch.run_id)
    # not fsynced: the runs row they go with is committed in WAL mode with synchronous=NORMAL, so
    # both survive a killed supervisor (what recovery is for) and neither is promised a power cut
    atomic_write_text(files["task"], launch.task_text, mode=0o600, durable=False)
    atomic_write_json(files["spec"], launch.__dict__, mode=0o600, durable=False)


def read_spec(layout: RepoLayout, run_id: str) -> Launch | None:
    try:
        data = json.loads(run_files(layout, run_id)["spec"].read_text())
    except (OSError, ValueError):
        return None
    return Launch(**data)


def dispatch_argv(layout: RepoLayout | None, launch: Launch, task_file: Path | None = None) -> list[str]:
    """The dispatch command; `task_file` where it is not the repository's (a cluster node's)."""
    from pilothouse.providers.hostpython import python_argv

    if task_file is None:
        assert layout is not None
        task_file = run_files(layout, launch.run_id)["task"]
    # isolated: its cwd is the task worktree, whose files the worker wrote
    argv = [*python_argv("-m", "pilothouse", "dispatch"), "--provider", launch.provider, "--mode", launch.mode,
            "--workdir", launch.workdir, "--task-file", str(task_file),
            "--run-id", launch.run_id]
    if launch.model:
        argv += ["--model", launch.model]
    if launch.session_id:
        argv += ["--session", launch.session_id]
    if launch.resume_of:
        argv += ["--resume-of", launch.resume_of]
    if launch.job:
        argv += ["--job", launch.job]
    return argv


def scenario_path(layout: RepoLayout, scenario: str) -> str:
    """The sim scenario a dispatch is told (read only by the sim provider; others ignore it). A
    relative path is the repository's, not one in the worktree the dispatch starts in (its worker
    wrote that)."""
    if ("/" in scenario or scenario.endswith((".yaml", ".yml"))) and not os.path.isabs(scenario):
        return str(layout.root / scenario)
    return scenario


def spawn(layout: RepoLayout, launch: Launch, *, nice: int = 0,
          notify_fd: int | None = None) -> subprocess.Popen[bytes]:
    """Start the dispatch in its own session, stdout/stderr to files under .ai/runtime/runs/, at CPU
    priority `nice` (core/dispatch/priority.py). `notify_fd`, the write end of a pipe, is handed to the
    dispatch, which writes to it once its verdict is on disk (the supervisor hears it at once)."""
    from pilothouse.core.dispatch import priority as cpu_priority
    from pilothouse.providers.hostpython import host_env

    files = run_files(layout, launch.run_id)
    env = host_env()
    from pilothouse.core.dispatch.prepare import SETTINGS_ENV

    env[SETTINGS_ENV] = str(settings_file(layout))
    if launch.scenario:
        env["PILOTHOUSE_SIM_SCENARIO"] = scenario_path(layout, launch.scenario)
    if notify_fd is not None:
        env[NOTIFY_ENV] = str(notify_fd)
    with open(files["out"], "ab") as out, open(files["err"], "ab") as err:
        proc = subprocess.Popen(dispatch_argv(layout, launch), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=launch.workdir, env=env, start_new_session=True, close_fds=True,
                                pass_fds=() if notify_fd is None else (notify_fd,))
    cpu_priority.lower(proc.pid, nice)
    return proc


# project.yaml's (mtime, size, inode) → the settings file made from it: one read per edit, not per launch
_SETTINGS: dict[Path, tuple[tuple[int, int, int] | None, Path]] = {}


def settings_file(layout: RepoLayout) -> Path:
    """The file of the confinement settings a dispatch reads (core/dispatch/prepare.py SETTINGS_ENV),
    made here from project.yaml: a dispatch that had to find and parse project.yaml itself paid for
    yaml and pydantic at its start, on the path from a verdict to the next launch."""
    from pilothouse.core.dispatch.prepare import _project_settings

    try:
        st = layout.project_yaml.stat()
        stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    known = _SETTINGS.get(layout.root)
    if known is not None and known[0] == stamp and known[1].is_file():
        return known[1]
    import hashlib

    from pilothouse.providers.fsutil import atomic_write_text

    text = json.dumps(_project_settings(layout.root), sort_keys=True)
    path = layout.runtime / "runs" / f"settings-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.is_file():
        atomic_write_text(path, text, mode=0o600, durable=False)
    _SETTINGS[layout.root] = (stamp, path)
    return path


def record_pid(conn: sqlite3.Connection, run_id: str, pid: int) -> str | None:
    start = pid_start(pid)
    conn.execute("UPDATE runs SET pid=?, pid_start=? WHERE run_id=?", (pid, start, run_id))
    return start


def last_verdict(lines: list[str]) -> dict[str, Any] | None:
    """The last verdict line among a dispatch's stdout lines."""
    for line in reversed(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "pilothouse.verdict":
            return obj
    return None


def read_verdict(layout: RepoLayout, run_id: str, provider: str) -> dict[str, Any] | None:
    """The run's verdict: the last line of its stdout, else the verdict.json dispatch wrote."""
    try:
        lines = run_files(layout, run_id)["out"].read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    found = last_verdict(lines)
    if found is not None:
        return found
    try:
        obj = json.loads(provider_logs(provider, run_id)["verdict"].read_text())
        return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):
        return None


def synth_verdict(layout: RepoLayout, row: sqlite3.Row, why: str) -> dict[str, Any]:
    """A verdict for a run that ended without writing one (crashed, killed, never started)."""
    try:
        tail = run_files(layout, row["run_id"])["err"].read_text(errors="replace")[-1500:]
    except OSError:
        tail = ""
    # the dispatch's own last words (e.g. "pilothouse: scenario file … not found") say why, where the
    # operator looks: the task's reason and the problem, not only the run's .err file
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    if last:
        why = f"{why}: {last[:300]}"
    return {"type": "pilothouse.verdict", "schema": 1, "run_id": row["run_id"], "provider": row["provider"],
            "mode": row["mode"], "verdict": "error", "exit_code": None, "tokens": None, "cost_usd": None,
            "usage": "unknown",
            "parse_state": "unavailable", "result": None, "session_id": None, "stderr_tail": tail,
            "error": why, "synthesized": True}


def verdict_tokens(verdict: dict[str, Any]) -> int:
    """The tokens a run adds to its task's and job's totals (what was counted; none when nothing was)."""
    from pilothouse.providers.usage import verdict_tokens as counted

    return counted(verdict) or 0


def finish_run(conn: sqlite3.Connection, events: EventLog, row: sqlite3.Row, verdict: dict[str, Any]) -> None:
    """Store the verdict and count the tokens (one transaction), then emit run.finished."""
    tokens = verdict_tokens(verdict)
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute("UPDATE runs SET state='finished', verdict=?, tokens=?, cost_usd=?, finished_at=?"
                           " WHERE run_id=? AND state!='finished'",
                           (json.dumps(verdict), tokens, float(verdict.get("cost_usd") or 0.0), utc_now_iso(),
                            row["run_id"]))
        if cur.rowcount and row["job"]:
            conn.execute("UPDATE jobs_state SET tokens=tokens+? WHERE job=?", (tokens, row["job"]))
            if row["task"]:
                conn.execute("UPDATE tasks SET tokens=tokens+?, activity=NULL WHERE job=? AND task=?",
                             (tokens, row["job"], row["task"]))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if not cur.rowcount:
        return
    from pilothouse.providers.usage import label_of
    from pilothouse.providers.usage import verdict_tokens as counted

    data = {"role": row["role"], "mode": row["mode"], "provider": row["provider"],
            "verdict": verdict.get("verdict"), "tokens": counted(verdict), "usage": label_of(verdict),
            "duration_s": verdict.get("duration_s"), "parse_state": verdict.get("parse_state"),
            "cost_usd": verdict.get("cost_usd")}
    if verdict.get("error"):
        data["error"] = verdict["error"]
    if verdict.get("reason"):
        data["reason"] = verdict["reason"]
    events.append("run.finished", job=row["job"], task=row["task"], run=row["run_id"], data=data)


class RunTail:
    """Reads a run's normalised event log incrementally: the current tool and usage so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.tool: str | None = None
        self.usage = {"input": 0, "output": 0, "reasoning": 0}
        self.sources: set[str] = set()  # the usage events' labels (providers/usage.py)

    def read(self) -> bool:
        """Consume new lines; True when the current tool changed."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return False
        if not chunk:
            return False
        self.offset += len(chunk)
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:]
        before = self.tool
        for raw in data[:cut].splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            kind = ev.get("kind") or ev.get("type")
            if kind == "tool":
                name = str(ev.get("name") or "tool")
                brief = str(ev.get("brief") or "")
                self.tool = f"{name} {brief}".strip()[:120] if ev.get("status") == "started" else self.tool
            elif kind == "usage":
                for k in self.usage:
                    self.usage[k] += int(ev.get(k) or 0)
                source = str(ev["source"]) if ev.get("source") in ("estimated", "unknown") else "measured"
                counted = any(ev.get(k) for k in ("input", "output", "reasoning", "cache_read", "cache_write"))
                self.sources.add(source if counted or source != "measured" else "unknown")  # as RunState.add
        return self.tool != before

    @property
    def label(self) -> str:
        """The usage label of the tokens so far (providers/usage.py)."""
        from pilothouse.providers.usage import combine

        return combine(self.sources)
