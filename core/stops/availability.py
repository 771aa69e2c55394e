"""Availability checks: one small real request to a provider, recorded as quota observations.

`providers check [PROVIDER]` and the supervisor use it. A check goes through `dispatch` like
any run (so every runner — builtin, opencode, claude-code, codex — is checked the way it
works), in explore mode with a one-line prompt and a step cap of 1; it may use a little of the
account's allowance. A successful answer is the only proof that a provider is back.
"""

from __future__ import annotations

import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from pilothouse.core.dispatch.runs import last_verdict
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import quota
from pilothouse.providers.hostpython import host_env, python_argv

CHECK_PROMPT = ("job: (availability check)\ntask: availability-check\n\n"
                "This is an availability check. Do not use any tool. Answer with the single word OK.\n")
CHECK_TIMEOUT_S = 90


def run_check(provider: str, timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """Dispatch the check; returns its verdict (a synthesized error verdict if dispatch failed)."""
    with tempfile.TemporaryDirectory(prefix="ph-check-") as tmp:
        task = Path(tmp) / "task.md"
        task.write_text(CHECK_PROMPT)
        work = Path(tmp) / "work"
        work.mkdir()
        argv = [*python_argv("-m", "pilothouse", "dispatch"), "--provider", provider, "--mode", "explore",
                "--workdir", str(work), "--task-file", str(task), "--step-cap", "1",
                "--timeout", str(int(timeout_s))]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30,
                                  stdin=subprocess.DEVNULL, env=host_env())
        except subprocess.TimeoutExpired:
            return {"verdict": "error", "error": f"the check did not finish in {timeout_s:.0f} s",
                    "provider": provider}
    found = last_verdict(proc.stdout.splitlines())
    if found is not None:
        return found
    err = (proc.stderr.strip().splitlines() or ["dispatch printed no verdict"])[-1]
    return {"verdict": "error", "error": err[:300], "provider": provider, "usage_error": proc.returncode == 2}


def check_provider(layout: RepoLayout, provider: str, now: datetime | None = None,
                   verdict: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run (or take) a check's verdict and record what it says; returns a summary for the CLI."""
    if verdict is None:
        verdict = run_check(provider)
    limited = verdict.get("verdict") == "quota" or verdict.get("error_class") == "quota"
    ok = verdict.get("verdict") in ("completed", "partial", "empty") and not limited
    if limited:
        if verdict.get("quota"):
            quota.record_verdict(layout, provider, verdict, now)
        else:
            quota.check_failed(layout, provider, now)
            if not any(w["blocked"] for w in quota.windows(layout, provider)):
                quota.record_quota(layout, provider, "unknown", None, None, "check", now, blocked=True)
    elif ok:
        quota.record_ok(layout, provider, "check", now)
    av = quota.availability(layout, provider, now)
    outcome = "available" if ok else ("usage limit" if limited else
                                      f"error ({verdict.get('error_class') or 'fatal'})")
    summary = {"provider": provider, "outcome": outcome, "verdict": verdict.get("verdict"),
               "error": verdict.get("error"), "availability": av.as_dict(),
               "windows": quota.windows(layout, provider)}
    from pilothouse.core.state.events import EventLog

    EventLog(layout.events).append("provider.checked", data={
        "provider": provider, "outcome": outcome, "available": av.available, "reason": av.reason,
        "error": verdict.get("error")})
    return summary
