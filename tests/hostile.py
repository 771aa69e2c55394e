"""The standing adversarial corpus's helpers (tests/core/test_hostile_builders.py): a fake
operator's files under the test HOME, a scripted sim builder dispatched for real (bubblewrap, the
dispatch process, the sim), and the two things every attack asserts afterwards: no marker outside
the sandbox, and the operator's files byte-identical.

A new attack class is one scenario (a YAML script whose bash actions do the attack; `@OPHOME@`
is the operator's home, `@MARKER@` a path outside the sandbox the attack tries to create) plus
one test entry that dispatches it and says what the host then does (a resume, a scan).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# what an operator keeps in the home a worker must never change (each runner's own config, the
# shell's start-up file, a key)
OPERATOR_FILES = {
    ".claude/settings.json": '{"model": "operator-choice", "theme": "dark"}\n',
    ".codex/config.toml": 'model = "operator-choice"\n',
    ".config/opencode/opencode.json": '{"theme": "operator"}\n',
    ".bashrc": "# the operator's shell start-up\nexport PS1='$ '\n",
    ".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\noperator\n-----END OPENSSH PRIVATE KEY-----\n",
}


def operator_home(home: Path) -> dict[str, bytes]:
    """Lay the operator's files into the test HOME; returns their snapshot."""
    for rel, text in OPERATOR_FILES.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return snapshot(home)


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file's bytes and every link's target under the roots (links are not followed)."""
    out: dict[str, bytes] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_symlink():
                    out[str(p)] = b"-> " + os.fsencode(os.readlink(p))
                elif p.is_file():
                    out[str(p)] = p.read_bytes()
    return out


def assert_unchanged(before: dict[str, bytes], after: dict[str, bytes], what: str) -> None:
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"{what} changed: {changed}"


@dataclass
class Attack:
    """One hostile builder: its scenario text and what it needs filled in."""

    name: str
    scenario: str
    marker: Path | None = None  # a path outside the sandbox the attack tries to create
    fill: dict[str, str] = field(default_factory=dict)

    def write(self, where: Path, home: Path) -> Path:
        text = self.scenario.replace("@OPHOME@", str(home))
        if self.marker is not None:
            text = text.replace("@MARKER@", str(self.marker))
        for k, v in self.fill.items():
            text = text.replace(k, v)
        p = where / f"hostile-{self.name}.yaml"
        p.write_text(text)
        return p


def script(code_turns: list[dict[str, Any]], resume_turns: list[dict[str, Any]] | None = None,
           name: str = "hostile", files: tuple[str, ...] = ()) -> str:
    """A scenario: code turns (the attack), a result, then the turns a resume continues with."""
    result = {"status": "complete", "files_changed": list(files), "validation": {"commands": [], "passed": True},
              "risks": []}
    done = {"say": f"Done.\n<!--RESULT-->{json.dumps(result)}<!--/RESULT-->"}
    after = [*(resume_turns or []), done]
    # a resume that keeps its session continues the code script; one that lost it (the attack
    # may have removed the session files) starts the resume script: never the attack again
    return json.dumps({"name": name, "description": f"hostile builder: {name}",
                       "scripts": [{"match": {"mode": "code"}, "turns": [*code_turns, done, *after]},
                                   {"match": {"mode": "resume"}, "turns": after}]})


def bash(command: str, say: str = "working") -> dict[str, Any]:
    return {"say": say, "actions": [{"bash": {"command": command}}]}


def write(path: str, content: str, say: str = "writing") -> dict[str, Any]:
    return {"say": say, "actions": [{"write": {"path": path, "content": content}}]}


@dataclass
class Dispatched:
    started: dict[str, Any]
    verdict: dict[str, Any]
    stdout: str
    stderr: str

    @property
    def run_id(self) -> str:
        return str(self.verdict["run_id"])


def dispatch(cli: Callable[..., Any], provider: str, workdir: Path, scenario: Path, *, mode: str = "code",
             resume_of: str | None = None, task: str = "Do the task.", timeout: float = 150) -> Dispatched:
    """A real `pilothouse dispatch` (or `resume`) of a scripted sim builder; its two JSON lines."""
    task_file = workdir.parent / f"task-{secrets.token_hex(4)}.md"
    task_file.write_text(task + "\n")
    if resume_of:
        args = ["resume", "--run-id", resume_of]
    else:
        args = ["dispatch", "--provider", provider, "--mode", mode, "--workdir", str(workdir)]
    args += ["--task-file", str(task_file), "--scenario", str(scenario), "--timeout", "120",
             "--idle-timeout", "90"]
    r = cli(*args, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert r.returncode == 0 and len(lines) == 2, f"dispatch failed ({r.returncode}): {r.stdout}\n{r.stderr}"
    return Dispatched(json.loads(lines[0]), json.loads(lines[1]), r.stdout, r.stderr)


def require_cli(runner: str) -> Path:
    """The agent CLI's binary from $PILOTHOUSE_TEST_RUNNERS; a clear failure (never a skip)."""
    import pytest
    from pilothouse.providers.runners.npm import find_binary

    binary = find_binary(runner) if os.environ.get("PILOTHOUSE_TEST_RUNNERS") else None
    if binary is None:
        pytest.fail(f"the {runner} CLI was not found in $PILOTHOUSE_TEST_RUNNERS; run scripts/install-runners "
                    "and export PILOTHOUSE_TEST_RUNNERS=$PWD/.runners", pytrace=False)
    return binary


def run_folder(provider: str, run_id: str) -> Path:
    from pilothouse.providers import paths

    return (paths.providers_dir() / provider / "runs" / run_id).resolve()


def tool_outputs(started: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's tool events (what the attack's commands did, as the run log has them)."""
    lines = Path(started["log"]).read_text().splitlines()
    return [e for e in (json.loads(ln) for ln in lines if ln.strip()) if e.get("kind") == "tool"]
