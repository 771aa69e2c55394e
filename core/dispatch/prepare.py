"""One bounded run of one worker (docs/contracts.md, "Dispatch"): validate, sandbox, spawn, watch, judge.

`prepare()` does every check that can fail because of the user's input (unknown provider,
missing key, workdir, task file, placeholder, credential in the task, malformed scenario) and
raises UserError — nothing has started yet, so the CLI prints one line and exits 2. `Run.execute()`
then always ends in a verdict, whatever the worker does, and writes it (with the events, the
stderr log and the report, all redacted) before returning it.

Speed: this path avoids pydantic/PyYAML altogether when it can (provider records come from the
JSON index; the started line is built by hand; plainly valid results and verdicts are checked by
providers/contract_fast.py, and only anything else loads the pydantic contract).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.providers import paths, sandbox
from pilothouse.providers.errors import UserError
from pilothouse.providers.modes import MODES

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_IDLE_S = 300.0
DEFAULT_STEP_CAP = {"explore": 40, "review": 40, "plan": 40, "test": 40, "code": 80, "resume": 60}
PLACEHOLDER = re.compile(r"<<FILL:[^>]*>>")


@dataclass
class DispatchOptions:
    provider: str
    mode: str
    workdir: str
    task_file: str | None = None
    task_text: str | None = None  # `run --task TEXT`
    run_id: str | None = None
    session: str | None = None
    resume_of: str | None = None
    scenario: str | None = None
    model: str | None = None
    step_cap: int | None = None
    timeout: float | None = None
    idle_timeout: float | None = None
    # the job the run works for: an MCP-speaking runner gets its request, decisions and screenshots
    # (core/dispatch/jobcontext.py)
    job: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def preamble(mode: str) -> str:
    return (paths.package_data() / "prompts" / f"{mode}.md").read_text(encoding="utf-8").rstrip("\n")


def compose_prompt(mode: str, task: str) -> str:
    """The worker's first user message: the mode preamble, a blank line, the task."""
    return f"{preamble(mode)}\n\n{task.strip()}\n"


def read_task(opts: DispatchOptions) -> str:
    if opts.task_text is not None:
        text, where = opts.task_text, "the task"
    elif opts.task_file:
        p = Path(opts.task_file)
        where = str(p)
        if not p.is_file():
            raise UserError(f"task file {p} does not exist; write the task there (see `pilothouse template "
                            f"{opts.mode}`)")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"task file {p} cannot be read as UTF-8 text ({exc}); save it as text") from None
    else:
        raise UserError("no task given; pass --task-file FILE")
    if not text.strip():
        raise UserError(f"{where} is empty; write the task (see `pilothouse template {opts.mode}`)")
    m = PLACEHOLDER.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise UserError(f"{where} still has a template placeholder on line {line} ({m.group(0)[:60]}); "
                        "fill it in or delete it")
    return text


def _project_settings(workdir: Path) -> dict[str, Any]:
    """`confinement` / `network` / `sandbox.read` / `sandbox.share` from the nearest .ai/project.yaml (for providers.confine)."""
    # (helper F) from the main checkout, never a worktree's own copy: its worker can edit that one
    from pilothouse.providers.confine import trusted_project_root

    given = os.environ.get(SETTINGS_ENV)
    if given:  # a cluster run's: its checkout has no main checkout to read them from
        try:
            data = json.loads(Path(given).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}
    workdir = trusted_project_root(workdir)
    for d in (workdir, *workdir.parents):
        f = d / ".ai" / "project.yaml"
        if f.is_file():
            try:
                import yaml

                data = yaml.safe_load(f.read_text()) or {}
            except Exception:
                return {}  # a broken project file is the supervisor's to report
            if not isinstance(data, dict):
                return {}
            out = {k: data[k] for k in ("confinement", "network") if k in data}
            from pilothouse.core.records.project import SandboxSettings

            try:  # an invalid `sandbox:` widens nothing (the supervisor names the error)
                sandbox = SandboxSettings.model_validate(data.get("sandbox") or {})
                out.update(sandbox_read=sandbox.read, sandbox_share=sandbox.share)
            except ValueError:
                pass
            gates = data.get("gates")
            protected = gates.get("protected") if isinstance(gates, dict) else None
            if isinstance(protected, list):
                out["protected"] = [str(g) for g in protected]
            holdout = gates.get("holdout") if isinstance(gates, dict) else None
            if isinstance(holdout, str):
                out["holdout"] = holdout
            return out
        if (d / ".git").exists():
            break
    return {}


@dataclass
class Prepared:
    opts: DispatchOptions
    provider: Any  # provider_index.Record
    runner: Any
    workdir: Path
    task: str
    key: str | None
    secrets: list[str]
    run_id: str
    model: str
    step_cap: int
    timeout_s: float
    idle_timeout_s: float
    scenario: str | None = None  # sim only: scenario name or path
    resume_of: str | None = None
    session: str | None = None


KEY_FD_ENV = "PILOTHOUSE_KEY_FD"
# a file of the settings _project_settings returns, written by a cluster run's actor (core/executor/node.py)
SETTINGS_ENV = "PILOTHOUSE_RUN_SETTINGS"
# a cluster node's actor names itself here: the dispatch it starts ends with it (core/commands/workers/dispatch.py)
PARENT_ENV = "PILOTHOUSE_DISPATCH_PARENT"


def passed_key() -> str | None:
    """The key a cluster run's actor hands its dispatch on a pipe (core/executor/node.py): the node
    keeps no keys, and argv and the environment are readable in /proc by every process of the user."""
    raw = os.environ.pop(KEY_FD_ENV, None)
    if raw is None or not raw.isdigit():
        return None
    try:
        with os.fdopen(int(raw), "rb") as fh:
            return fh.read(1 << 16).decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def prepare(opts: DispatchOptions) -> Prepared:
    from pilothouse.providers import guard, keys, provider_index
    from pilothouse.providers.runners import get_runner

    if opts.mode not in MODES:
        raise UserError(f"unknown mode '{opts.mode}'; use one of {', '.join(MODES)}")
    prov = provider_index.record(opts.provider)
    runner = get_runner(prov.runner)
    if not runner.installed():
        raise UserError(f"the {prov.runner} runner for provider '{prov.key}' is not installed; run "
                        f"`pilothouse install runner {prov.runner}`")
    workdir = Path(opts.workdir).expanduser()
    if not workdir.exists():
        raise UserError(f"workdir {workdir} does not exist; pass an existing directory with --workdir")
    if not workdir.is_dir():
        raise UserError(f"workdir {workdir} is not a directory; pass a directory with --workdir")
    workdir = workdir.resolve()
    task = read_task(opts)
    key = passed_key() or keys.get_key(prov.key)
    if prov.needs_key and not key:
        raise UserError(f"no API key for provider '{prov.key}'; set it with `pilothouse key set {prov.key}`")
    if prov.is_sim and not key:
        # a throwaway key: the sim then refuses anything without it, so every runner's real auth
        # path (credential file in the sandbox → header) is exercised, and it is redacted like a key
        key = "sim-" + os.urandom(16).hex()
    secrets = keys.configured_secrets()
    if key and key not in secrets:
        secrets.append(key)
    guard.check_task(task, secrets, source=opts.task_file or "the task")
    for name, value in (("--timeout", opts.timeout), ("--idle-timeout", opts.idle_timeout),
                        ("--step-cap", opts.step_cap)):
        if value is not None and value <= 0:
            raise UserError(f"{name} must be a positive number (got {value})")
    run_id = opts.run_id or sandbox.new_run_id()
    if not sandbox.valid_run_id(run_id):
        raise UserError(f"run id '{run_id}' is not valid; use letters, digits, '-', '_' or '.'")
    if (sandbox.runs_dir(prov.key) / run_id).exists():
        raise UserError(f"run id '{run_id}' already exists for provider '{prov.key}'; pick a new --run-id")
    session = opts.session
    if opts.resume_of or opts.mode == "resume":
        if not opts.resume_of:
            raise UserError("resume needs the run to continue: pass --resume-of RUN (or use "
                            "`pilothouse resume --run-id RUN --task-file F`)")
        if not (sandbox.runs_dir(prov.key) / opts.resume_of).exists():
            raise UserError(f"run '{opts.resume_of}' has no sandbox for provider '{prov.key}' (pruned, or "
                            "another provider?); start a new run instead")
        if not session:
            session = previous_session(prov.key, opts.resume_of)
    scenario = None
    if prov.is_sim:
        # loaded (and validated) by execute() while the worker boots: see dispatch_run
        scenario = opts.scenario or os.environ.get("PILOTHOUSE_SIM_SCENARIO") or prov.scenario or "explore-basic"
    elif opts.scenario:
        raise UserError(f"--scenario only applies to the simulator; provider '{prov.key}' is not one")
    return Prepared(opts=opts, provider=prov, runner=runner, workdir=workdir, task=task, key=key,
                    secrets=secrets, run_id=run_id, model=opts.model or prov.model_id,
                    step_cap=int(opts.step_cap or DEFAULT_STEP_CAP[opts.mode]),
                    timeout_s=float(opts.timeout or DEFAULT_TIMEOUT_S),
                    idle_timeout_s=float(opts.idle_timeout or DEFAULT_IDLE_S),
                    scenario=scenario, resume_of=opts.resume_of, session=session)


def previous_session(key: str, run_id: str) -> str | None:
    """The session id recorded in a finished run's verdict (None if it never got that far)."""
    import json

    try:
        data = json.loads((paths.logs_dir() / key / f"{run_id}.verdict.json").read_text())
    except (OSError, ValueError):
        return None
    sid = data.get("session_id") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) else None


def find_previous_run(run_id: str) -> dict[str, Any]:
    """Provider, mode, session and workdir of an earlier run, for `pilothouse resume --run-id RUN`."""
    import json

    found = sandbox.find_run(run_id)
    if found is None:
        raise UserError(f"no run '{run_id}' found under {paths.providers_dir()}; check the id "
                        "(it is in the started/verdict lines)")
    key, root = found
    info: dict[str, Any] = {"provider": key, "session_id": None, "mode": None, "workdir": None}
    try:  # the sandbox's run record (written at the run's start)
        info["workdir"] = str(json.loads((root / "run.json").read_text())["workdir"])
    except (OSError, ValueError, KeyError):
        pass
    try:
        data = json.loads((paths.logs_dir() / key / f"{run_id}.verdict.json").read_text())
        info.update(session_id=data.get("session_id"), mode=data.get("mode"))
    except (OSError, ValueError):
        pass
    return info


def refuse_line(provider: str, message: str) -> None:
    """A refused dispatch still leaves a trace in latest.log (the run never started)."""
    try:
        sandbox.latest_line(f"{provider} pid {os.getpid()} FAILED before start: {message}")
    except OSError:
        pass
