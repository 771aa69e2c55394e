"""The files half of the probe: what a confined worker plants in its own run folder must not turn
the host's next step into a write or a hang outside it (the fast attacks of the hostile corpus,
tests/core/test_hostile_builders.py, without a model).

From inside a real sandbox a planter links the run's config folders and the simulator's served
log to decoy files outside the sandbox and leaves a FIFO in its HOME. Then the host does what it
does on the next dispatch and after a run, with the real code: every runner's config set-up (a
resume's), the served-log append, the end-of-run scrub and scan-secrets' walk. A check passes
when every decoy is byte-identical afterwards and nothing blocked.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pilothouse.providers.runners.base import RunSpec

# Runs inside the sandbox: plants what argv names (kind, path, target), reports what it did.
PLANTER = r"""
import json, os, sys
out = {}
args = sys.argv[1:]
for kind, path, target in zip(args[0::3], args[1::3], args[2::3]):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rename(path, path + ".was")
        elif os.path.lexists(path):
            os.unlink(path)
        if kind == "link":
            os.symlink(target, path)
        else:
            os.mkfifo(path)
        out[path] = "planted"
    except OSError as exc:
        out[path] = f"refused: {exc.strerror}"
print(json.dumps(out))
"""
DECOY = b"the operator's own file: the probe fails if one byte of it changes\n"
HOST_STEP_TIMEOUT_S = 30.0


def _plan(spec: RunSpec, decoys: Path) -> list[tuple[str, str, Path, Path | None]]:
    """(check, kind, planted path, decoy it points at) for each plant."""
    sb = spec.sandbox
    return [
        ("claude-code config folder -> operator's", "link", sb.config / "claude", decoys / "claude"),
        ("codex config folder -> operator's", "link", sb.config / "codex", decoys / "codex"),
        ("opencode plugin -> operator's file", "link", sb.config / "pilothouse-retry.js", decoys / "plugin.js"),
        ("served.jsonl -> operator's file", "link", sb.state / "served.jsonl", decoys / "bashrc"),
        ("a FIFO in the run HOME", "fifo", sb.home / "trap", None),
    ]


def _host_steps(spec: RunSpec) -> list[str]:
    """What the host does with a run folder next (each with the real code); the skip and refusal
    lines it said."""
    from pilothouse.providers import scan, scrub
    from pilothouse.providers.redact import Redactor
    from pilothouse.providers.runners import claude_code, codex, opencode
    from pilothouse.providers.sim.server import SimServer, load_scenario

    claude_code.write_config(spec)
    codex.write_config(spec, "read-only")
    opencode.write_config(spec, "0.0.0")
    skipped: list[str] = []
    # the link was planted on purpose: the refusal is this check's evidence, not the operator's alarm
    sim = SimServer(load_scenario("explore-basic"), served_log=spec.sandbox.state / "served.jsonl",
                    warn=skipped.append)
    sim.record("probe", None, 500, None)
    scrub.scrub_tree(spec.sandbox.root, Redactor(["sk-probe-not-a-key-0000"]))
    scan.scan([spec.sandbox.root], ["sk-probe-not-a-key-0000"], on_skip=lambda s: skipped.append(s.line()))
    return skipped


def file_checks(spec: RunSpec, base: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    from pilothouse.providers.confine.probe_reads import run_inside

    decoys = base / "operator"
    for d in (decoys / "claude", decoys / "codex"):
        d.mkdir(parents=True, exist_ok=True)
    files = [decoys / "claude" / "settings.json", decoys / "codex" / "config.toml", decoys / "plugin.js",
             decoys / "bashrc"]
    for f in files:
        f.write_bytes(DECOY)
    plan = _plan(spec, decoys)
    argv: list[str] = []
    for _check, kind, path, target in plan:
        argv += [kind, str(path), str(target or "")]
    planted = run_inside(spec, PLANTER, argv, env)
    done: dict[str, Any] = {}

    def host() -> None:
        try:
            done["skipped"] = _host_steps(spec)
        except Exception as exc:  # a step that raised is a failed check, never a crashed probe
            done["error"] = f"{type(exc).__name__}: {exc}"

    # a host step that blocks on a FIFO never returns: it is given a bound and counted a failure
    t = threading.Thread(target=host, daemon=True)
    t.start()
    t.join(HOST_STEP_TIMEOUT_S)
    hung = t.is_alive()
    changed = {str(f) for f in files if f.read_bytes() != DECOY}
    results = []
    for check, _kind, path, target in plan:
        child = planted.get(str(path), "not attempted")
        if target is None:
            reached = hung
            skipped = any(line.startswith(f"{path.relative_to(spec.sandbox.root)}: skipped") or str(path) in line
                          for line in done.get("skipped", []))
            ok = child == "planted" and not hung and "error" not in done and skipped
        else:
            reached = any(c.startswith(str(target)) for c in changed)
            ok = child == "planted" and not reached and not hung and "error" not in done
            if path.name == "served.jsonl":  # the sim says it refused (else the run's log is lost unsaid)
                ok = ok and any(str(path) in line for line in done.get("skipped", []))
        results.append({"check": f"host steps: {check}", "path": str(path), "expect": "not followed",
                        "child": child + (f"; host: {done['error']}" if "error" in done else "")
                        + ("; host step blocked" if hung else ""), "reached_host": reached, "pass": ok})
    return results

