"""`pilothouse init`: the test command the repository itself uses, and why that one.

Every place a project states how it is checked gives candidates — its CI workflows, tox / nox,
a Makefile, pytest settings, package.json (npm, pnpm or yarn, by lockfile), Cargo, Go — and the
gate is the best of those that run tests: a step that only lints, type-checks or builds docs is
listed (so `init --dry-run` can say why it was passed over) but never chosen. A tox env or nox
session is resolved to the commands it runs; a Python gate names its interpreter by absolute
path — the repository's own virtualenv when it has one — because gates run in worktrees outside
the repository, where a relative `.venv` does not exist and `python` would be whatever came
first on the supervisor's PATH (pilothouse's own venv, after the README's install).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.core.records.detect_node import node_gate
from pilothouse.core.records.detect_python import (
    LINT_NAMES,
    VENVS,
    nox_sessions,
    python_gate,
    python_of,
    read_text,
    tox_env,
    venv_of,
)

__all__ = ["Candidate", "Found", "detect", "python_of", "resolve_bare", "share_of"]

# where a candidate was found: the more deliberate the statement, the higher (CI is what the
# project's maintainers run on every change)
_SOURCE_RANK = {"ci": 50, "tox": 40, "nox": 40, "make": 30, "node": 25, "pytest": 20, "cargo": 20, "go": 20}
_LINT_LINE = re.compile(r"^\s*(?:\S*/)?(ruff|flake8|pylint|mypy|pyright|black|isort|pre-commit|eslint|prettier|"
                        r"golangci-lint|gofmt|staticcheck|cargo\s+(?:clippy|fmt)|codespell|twine|sphinx-build|"
                        r"(?:python[0-9.]*\s+-m\s+)?(?:build|mypy|ruff|flake8|pylint|black))\b")
_TOOL = re.compile(r"(?:^|&&|;)\s*((?:npm|pnpm|yarn)\s+(?:run\s+)?(?:test|[\w:.-]*test[\w:.-]*)\b[^&;|\n]*|"
                   r"cargo\s+(?:test|nextest\s+run)\b[^&;|\n]*|go\s+test\b[^&;|\n]*|make\s+[\w.-]*test[\w.-]*\b[^&;|\n]*|"
                   r"tox\b[^&;|\n]*|nox\b[^&;|\n]*)")


@dataclass
class Candidate:
    command: str | None  # None: it was looked at and runs no tests (a lint step, an unresolved env)
    where: str
    why: str
    kind: str  # ci, tox, nox, make, node, pytest, cargo, go
    runs_tests: bool = True
    warnings: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return (100 if self.runs_tests and self.command else 0) + _SOURCE_RANK.get(self.kind, 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rank": self.rank}


@dataclass
class Found:
    fast: str
    full: str
    why: str  # where it was found, in words the operator can check
    candidates: list[Candidate] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def gates(self) -> dict[str, str]:
        return {"fast": self.fast, "full": self.full}


def _go_gate(args: str) -> str:
    """`go test`, verbose: each test's PASS/FAIL line is where the gate reads its counts."""
    words = args.split()
    if "-v" in words or "-json" in words:
        return f"go test {args.strip()}"
    return f"go test -v {args.strip() or './...'}"


def _tool_line(root: Path, line: str, where: str, kind: str) -> Candidate | None:
    """A candidate from one shell line of a CI step, a Makefile recipe, …; None when it runs no
    known tool."""
    gate = python_gate(root, line)
    if gate:
        return Candidate(gate, where, f"runs {line.strip()[:80]!r}; with {python_of(root)[1]}", kind)
    if _LINT_LINE.match(line):
        return Candidate(None, where, f"lint or build only ({line.strip()[:60]!r})", kind, runs_tests=False)
    t = _TOOL.search(line)
    if not t:
        return None
    cmd = t.group(1).strip()
    words = cmd.split()
    if words[0] == "tox":
        env = _flag(words, "-e")
        gate, at, lint = tox_env(root, env.split(",")[0] if env else None)
        if gate:
            return Candidate(gate, where, f"runs `{cmd}`: {at} runs {gate.split(' -m ', 1)[-1]!r}, here with "
                                          f"{python_of(root)[1]} (tox itself is not needed)", kind)
        return Candidate(None, where, f"runs `{cmd}`: {at} " + ("is lint-only" if lint else "runs no test runner"),
                         kind, runs_tests=False)
    if words[0] == "nox":
        wanted = _flag(words, "-s") or _flag(words, "--session")
        for name, gate in nox_sessions(root):
            if gate and (wanted is None or name == wanted):
                return Candidate(gate, where, f"runs `{cmd}`: noxfile.py session {name!r}, here with "
                                              f"{python_of(root)[1]}", kind)
        return Candidate(None, where, f"runs `{cmd}`: no nox session of it runs a test runner", kind,
                         runs_tests=False)
    if words[0] in ("npm", "pnpm", "yarn"):
        found = node_gate(root)
        if found is None:
            return None
        gate, why, warnings = found
        return Candidate(gate, where, f"runs `{cmd}`: {why}", kind, warnings=warnings)
    if words[0] == "go":
        return Candidate(_go_gate(cmd[len("go test"):]), where, f"runs `{cmd}`", kind)
    return Candidate(cmd, where, f"runs `{cmd}`", kind)


def _flag(words: list[str], flag: str) -> str | None:
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(flag + "="):
            return w.split("=", 1)[1]
        if flag == "-e" and w.startswith("-e") and len(w) > 2 and not w.startswith("--"):
            return w[2:]
    return None


def _ci(root: Path) -> list[Candidate]:
    import yaml

    out: list[Candidate] = []
    for wf in sorted((root / ".github" / "workflows").glob("*.y*ml")):
        try:
            doc = yaml.safe_load(read_text(wf))
        except yaml.YAMLError:
            continue
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        for name, job in (jobs or {}).items() if isinstance(jobs, dict) else []:
            for step in job.get("steps") or [] if isinstance(job, dict) else []:
                run = step.get("run") if isinstance(step, dict) else None
                for line in str(run or "").replace("\\\n", " ").splitlines():
                    found = _tool_line(root, line, f".github/workflows/{wf.name} (job {name})", "ci")
                    if found:
                        out.append(found)
    return out


def _tox(root: Path) -> list[Candidate]:
    from pilothouse.core.records.detect_python import tox_envs

    if not any((root / f).is_file() for f in ("tox.ini", "setup.cfg", "pyproject.toml")):
        return []
    gate, at, lint = tox_env(root, None)
    if at == "tox (no tox.ini)":
        return []
    if gate:
        return [Candidate(gate, at, f"runs {gate.split(' -m ', 1)[-1]!r}; with {python_of(root)[1]}", "tox")]
    out = [Candidate(None, at, "runs no test runner", "tox", runs_tests=False)] if tox_envs(root) or not lint else []
    return out


def _nox(root: Path) -> list[Candidate]:
    return [Candidate(gate, f"noxfile.py session {name!r}", f"runs pytest; with {python_of(root)[1]}", "nox")
            if gate else Candidate(None, f"noxfile.py session {name!r}",
                                   "lint-only" if LINT_NAMES.match(name) else "runs no test runner", "nox",
                                   runs_tests=False)
            for name, gate in nox_sessions(root)]


def _make(root: Path) -> list[Candidate]:
    text = read_text(root / "Makefile")
    out = []
    for m in re.finditer(r"(?m)^([\w.-]*test[\w.-]*)\s*:[^=]", text):
        out.append(Candidate(f"make {m.group(1)}", f"Makefile target {m.group(1)!r}",
                             f"the Makefile has a `{m.group(1)}` target", "make"))
    for m in re.finditer(r"(?m)^(lint|check|style|format|typecheck)\s*:[^=]", text):
        out.append(Candidate(None, f"Makefile target {m.group(1)!r}", "lint-only", "make", runs_tests=False))
    return out


def _pytest(root: Path) -> list[Candidate]:
    pyproject, setup_cfg = root / "pyproject.toml", root / "setup.cfg"
    where = ("pytest.ini" if (root / "pytest.ini").exists() else
             "conftest.py" if (root / "conftest.py").exists() else
             "pyproject.toml [tool.pytest]" if pyproject.exists() and "[tool.pytest" in read_text(pyproject) else
             "setup.cfg [tool:pytest]" if setup_cfg.exists() and "[tool:pytest]" in read_text(setup_cfg) else
             next((f"{d}/test_*.py" for d in ("tests", "test", "testing") if (root / d).is_dir() and
                   any((root / d).rglob("test_*.py"))), None))
    if where is None:
        return []
    cmd = python_gate(root, "pytest -q")
    assert cmd is not None
    return [Candidate(cmd, where, f"pytest settings or tests found ({where}); with {python_of(root)[1]}", "pytest")]


def _node(root: Path) -> list[Candidate]:
    found = node_gate(root)
    if found is None:
        return []
    gate, why, warnings = found
    return [Candidate(gate, "package.json", why.removeprefix("package.json's "), "node", warnings=warnings)]


def _cargo_go(root: Path) -> list[Candidate]:
    out = []
    if (root / "Cargo.toml").is_file():
        out.append(Candidate("cargo test", "Cargo.toml", "a Rust crate: its unit, integration and doc tests",
                             "cargo"))
    if (root / "go.mod").is_file():
        out.append(Candidate(_go_gate(""), "go.mod", "a Go module: every package's tests (-v: each test's "
                                                      "result, for the counts)", "go"))
    return out


def candidates(root: Path) -> list[Candidate]:
    """Every candidate, the best first (stable: within a rank, the order they were found in)."""
    found: list[Candidate] = []
    for look in (_ci, _tox, _nox, _make, _pytest, _node, _cargo_go):
        found.extend(look(root))
    return sorted(found, key=lambda c: -c.rank)


def detect(root: Path) -> Found | None:
    """The repository's own test command, or None when nothing says which."""
    every = candidates(root)
    best = next((c for c in every if c.command and c.runs_tests), None)
    if best is None or best.command is None:
        return None
    passed = [c for c in every if c is not best and not c.runs_tests]
    why = f"{best.where} {best.why}" + (f" (passed over: {'; '.join(f'{c.where}, {c.why}' for c in passed[:3])})"
                                       if passed else "")
    return Found(best.command, best.command, why, every, list(best.warnings))


def resolve_bare(root: Path, command: str) -> str:
    """A gate given by hand whose program is a bare `python`/`pytest`: the repository's own
    virtualenv's by absolute path (a bare one would be whatever comes first on the supervisor's
    PATH, pilothouse's own venv after the README's install). Unchanged without a virtualenv."""
    name = venv_of(root)
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if not name or not words:
        return command
    program = words[0]
    if re.fullmatch(r"python[0-9.]*", program):
        exe = root / name / "bin" / program
        exe = exe if exe.exists() else root / name / "bin" / "python"
    elif program in ("pytest", "py.test", "coverage", "tox"):
        exe = root / name / "bin" / program
        if not exe.exists():
            return command
    else:
        return command
    rest = command.lstrip()[len(program):] if command.lstrip().startswith(program) else " " + shlex.join(words[1:])
    return f"{shlex.quote(str(exe.absolute()))}{rest}"


def share_of(root: Path, gates: dict[str, str]) -> list[str]:
    """The dependency folders of the checkout the gates need in their worktrees (`sandbox.share`):
    the repository's virtualenv, `node_modules` beside a package.json. The sandbox hides the rest of
    the checkout, so a gate naming `/repo/.venv/bin/python` finds nothing there without it; a venv
    is shared even when no gate names it, since an installed project's tests import from it."""
    out: list[str] = []
    name = venv_of(root)
    if name:
        out.append(name)
    commands = " ".join(gates.values())
    for other in VENVS:
        if other != name and (root / other / "bin" / "python").is_file() and (
                str((root / other).absolute()) + "/" in commands
                or re.search(rf"(^|\s){re.escape(other)}/", commands)):
            out.append(other)
    if (root / "package.json").is_file() and (root / "node_modules").is_dir() and not (root / "node_modules").is_symlink():
        out.append("node_modules")
    return out
