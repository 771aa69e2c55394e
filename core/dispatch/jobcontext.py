"""What a worker of a job may read about it over MCP: a copy of the job's record and screenshots that
dispatch writes into the run's sandbox, served there by `pilothouse mcp --worker --job NAME --context DIR`.

The sandbox hides the operator's checkout (its records, state.db, the event log), so the worker's
server reads this copy and nothing else: no route from a worker reaches the repository's state,
let alone writes it. The copy is made on the host from the validated record, sits in the sandbox
root (read-only inside it), and is made again on each run (a resume sees the newest decisions).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

SERVER_NAME = "pilothouse"  # how the agent CLIs name the server (Claude Code: mcp__pilothouse__job_request)
CONTEXT_DIR = "job"


def write_job_context(workdir: Path, job: str, sandbox_root: Path) -> dict[str, Any] | None:
    """Copy `job`'s record and attachments into `sandbox_root`/job; the server to start for the
    worker ({name, command, args}), or None when the job has no record to serve."""
    from pilothouse.core.records.jobs import load_job, read_attachment, validate_name
    from pilothouse.core.records.layout import RepoLayout, find_repo
    from pilothouse.providers.errors import UserError
    from pilothouse.providers.fsutil import atomic_write_bytes, atomic_write_text
    from pilothouse.providers.hostpython import python_argv

    validate_name(job)
    try:
        layout = find_repo(workdir)
        record = load_job(layout, job)
    except UserError:
        return None  # tasks defined by hand for a job without a record: nothing to serve
    dest = sandbox_root / CONTEXT_DIR
    fresh = sandbox_root / f".{CONTEXT_DIR}.new"
    shutil.rmtree(fresh, ignore_errors=True)
    copy = RepoLayout(fresh)
    copy.jobs_dir.mkdir(parents=True)
    atomic_write_text(copy.jobs_dir / f"{job}.json", record.model_dump_json(indent=1) + "\n", mode=0o600,
                      durable=False)
    for a in record.attachments:
        # read like the server would (the job's folder only, no link followed, bounded)
        atomic_write_bytes(fresh / a.path, read_attachment(layout, job, a.path), mode=0o600, durable=False)
    from pilothouse.core.dispatch.handshake import worker_record

    worker_record(fresh)  # so the server answers the CLI's handshake at once
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(fresh, dest)
    argv = python_argv("-m", "pilothouse", "mcp", "--worker", "--job", job, "--context", str(dest))
    return {"name": SERVER_NAME, "command": argv[0], "args": argv[1:]}
