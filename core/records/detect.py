"""`pilothouse init`: the test command the repository itself uses, and why that one.

Looked for in the order a project states it most deliberately: its CI workflows, tox / nox, a
Makefile `test` target, pytest settings, package.json (npm, pnpm or yarn, by lockfile), Cargo,
Go. A Python gate names its interpreter by absolute path — the repository's own virtualenv when
it has one — because gates run in worktrees outside the repository, where a relative `.venv`
does not exist and `python` would be whatever came first on the supervisor's PATH.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

_NPM_PLACEHOLDER = "no test specified"
_VENVS = (".venv", "venv", "env", ".env")
# a pytest invocation inside a shell line: `pytest …`, `python -m pytest …`, `py.test …`
_PYTEST = re.compile(r"(?:^|&&|;|\|\|)\s*(?:(?:\S*/)?python[0-9.]*\s+-m\s+pytest|(?:\S*/)?py\.?test)\b([^&;|\n]*)")
_TOOLS = re.compile(r"(?:^|&&|;)\s*((?:npm|pnpm|yarn)\s+(?:run\s+)?test\b[^&;|\n]*|cargo\s+test\b[^&;|\n]*|"
                    r"go\s+test\b[^&;|\n]*|make\s+test\b[^&;|\n]*|tox\b[^&;|\n]*|nox\b[^&;|\n]*)")


def _read(path: Path) -> str:
    """A file of the repository, for detection only: "" when it is missing, a link, not a regular
    file, too large or unreadable. Through the bounded reader every command uses (a workflow that
    is a link to /dev/zero or to a file outside must neither hang init nor end up in a gate)."""
    from pilothouse.providers import userfile
    from pilothouse.providers.errors import UserError

    if path.is_symlink():
        return ""
    try:
        return userfile.read_bytes(path, str(path), 1 << 20).decode("utf-8", errors="replace")
    except (OSError, UserError):
        return ""


@dataclass
class Found:
    fast: str
    full: str
    why: str  # where it was found, in words the operator can check

    def gates(self) -> dict[str, str]:
        return {"fast": self.fast, "full": self.full}


def python_of(root: Path) -> tuple[str, str]:
    """(the interpreter a Python gate names, why): the repository's virtualenv, else the Python on
    PATH now, both by absolute path."""
    for name in _VENVS:
        exe = root / name / "bin" / "python"
        if exe.is_file():
            return str(exe.absolute()), f"the repository's virtualenv {name}/"
    found = shutil.which("python3") or shutil.which("python")
    if found:
        return found, "the python3 on PATH (no virtualenv in the repository)"
    return "python3", "python3 (none found on PATH: name yours in .ai/project.yaml)"


def _pytest_gate(root: Path, args: str) -> str:
    py, _ = python_of(root)
    args = " ".join(a for a in shlex.split(args, comments=True) if a != "{posargs}") if args.strip() else ""
    return f"{shlex.quote(py)} -m pytest{' ' + args if args else ''}".strip()


def _from_line(root: Path, line: str, where: str) -> Found | None:
    m = _PYTEST.search(line)
    if m:
        cmd = _pytest_gate(root, m.group(1))
        return Found(cmd, cmd, f"{where} runs pytest ({line.strip()[:80]}); "
                               f"with {python_of(root)[1]}")
    t = _TOOLS.search(line)
    if t:
        cmd = t.group(1).strip()
        return Found(cmd, cmd, f"{where} runs `{cmd}`")
    return None


def _ci(root: Path) -> Found | None:
    import yaml

    for wf in sorted((root / ".github" / "workflows").glob("*.y*ml")):
        try:
            doc = yaml.safe_load(_read(wf))
        except yaml.YAMLError:
            continue
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        for job in (jobs or {}).values() if isinstance(jobs, dict) else []:
            for step in job.get("steps") or [] if isinstance(job, dict) else []:
                run = step.get("run") if isinstance(step, dict) else None
                for line in str(run or "").splitlines():
                    found = _from_line(root, line, f".github/workflows/{wf.name}")
                    if found:
                        return found
    return None


def _tox(root: Path) -> Found | None:
    import configparser

    ini = root / "tox.ini"
    if ini.is_file():
        cp = configparser.ConfigParser(interpolation=None)
        try:
            cp.read_string(_read(ini))
        except configparser.Error:
            return None
        for section in ("testenv", *[s for s in cp.sections() if s.startswith("testenv")]):
            for line in (cp.get(section, "commands", fallback="") or "").splitlines():
                found = _from_line(root, line, f"tox.ini [{section}]")
                if found:
                    return found
    nox = root / "noxfile.py"
    if nox.is_file():
        m = re.search(r"session\.run\(\s*[\"']pytest[\"']((?:\s*,\s*[\"'][^\"']*[\"'])*)",
                      _read(nox))
        if m:
            args = " ".join(re.findall(r"[\"']([^\"']*)[\"']", m.group(1)))
            cmd = _pytest_gate(root, args)
            return Found(cmd, cmd, f"noxfile.py runs pytest {args}".rstrip() + f"; with {python_of(root)[1]}")
    return None


def _make(root: Path) -> Found | None:
    mk = root / "Makefile"
    if mk.is_file() and re.search(r"(?m)^test\s*:", _read(mk)):
        return Found("make test", "make test", "the Makefile has a `test` target")
    return None


def _pytest(root: Path) -> Found | None:
    pyproject, setup_cfg = root / "pyproject.toml", root / "setup.cfg"
    where = ("pytest.ini" if (root / "pytest.ini").exists() else
             "conftest.py" if (root / "conftest.py").exists() else
             "pyproject.toml [tool.pytest]" if pyproject.exists() and "[tool.pytest" in _read(pyproject) else
             "setup.cfg [tool:pytest]" if setup_cfg.exists() and "[tool:pytest]" in _read(setup_cfg) else
             next((f"{d}/test_*.py" for d in ("tests", "test") if (root / d).is_dir() and
                   any((root / d).rglob("test_*.py"))), None))
    if where is None:
        return None
    cmd = _pytest_gate(root, "-q")
    return Found(cmd, cmd, f"pytest settings or tests found ({where}); with {python_of(root)[1]}")


def _node(root: Path) -> Found | None:
    package = root / "package.json"
    if not package.is_file():
        return None
    try:
        scripts = json.loads(_read(package)).get("scripts") or {}
    except (ValueError, AttributeError):
        return None
    test = scripts.get("test") if isinstance(scripts, dict) else None
    if not (isinstance(test, str) and test.strip() and _NPM_PLACEHOLDER not in test):
        return None
    tool, lock = next(((t, f) for t, f in (("pnpm", "pnpm-lock.yaml"), ("yarn", "yarn.lock"),
                                           ("npm", "package-lock.json")) if (root / f).exists()),
                      ("npm", None))
    why = f"package.json's test script ({test[:60]}), run with {tool}" + (f" ({lock})" if lock else "")
    return Found(f"{tool} test", f"{tool} test", why)


def _cargo_go(root: Path) -> Found | None:
    if (root / "Cargo.toml").is_file():
        return Found("cargo test", "cargo test", "Cargo.toml")
    if (root / "go.mod").is_file():
        return Found("go test ./...", "go test ./...", "go.mod")
    return None


def share_of(root: Path, gates: dict[str, str]) -> list[str]:
    """The dependency folders of the checkout the gates need in their worktrees (`sandbox.share`):
    a virtualenv a gate names, `node_modules` beside a package.json. The sandbox hides the rest of
    the checkout, so a gate naming `/repo/.venv/bin/python` finds nothing there without it."""
    out: list[str] = []
    commands = " ".join(gates.values())
    for name in _VENVS:
        if (root / name / "bin" / "python").is_file() and (
                str((root / name).absolute()) + "/" in commands or re.search(rf"(^|\s){re.escape(name)}/", commands)):
            out.append(name)
    if (root / "package.json").is_file() and (root / "node_modules").is_dir() and not (root / "node_modules").is_symlink():
        out.append("node_modules")
    return out


def detect(root: Path) -> Found | None:
    """The repository's own test command, or None when nothing says which."""
    for look in (_ci, _tox, _make, _pytest, _node, _cargo_go):
        found = look(root)
        if found is not None:
            return found
    return None
