"""What a Python project's own files say its tests are: a tox or nox env resolved to the commands
it runs, with the repository's interpreter in place of tox's or nox's, and the project's own
options (doctest flags, ignores, markers) kept.

tox and nox need not be installed: a gate runs what the env would run, in the virtualenv the
operator already made (tox's own would be built per worktree, and often needs the network).
"""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
from pathlib import Path

VENVS = (".venv", "venv", "env", ".env")
# a tox env or nox session by one of these names checks style, types or docs: never the test gate
LINT_NAMES = re.compile(r"^(lint|linters?|flake8|pylint|ruff|mypy|pyright|typing|types?|typecheck|mypy\w*|"
                        r"style|format|fmt|black|isort|pre-?commit|docs?|doc8|spell\w*|check-?manifest|"
                        r"pkg|packaging|build|release|readme|coverage-report|cov-report|bandit|safety|audit)"
                        r"([-_.].*)?$", re.IGNORECASE)
# a command that runs a test runner, and the arguments after it
_PYTEST = re.compile(r"^(?:\S*/)?(?:(?:python[0-9.]*|\{envpython\}|\{envbindir\}/python)\s+-m\s+pytest|"
                     r"(?:coverage\s+run\s+(?:[^-\s]\S*\s+|-\S+\s+)*?-m\s+pytest)|py\.?test)(\s.*)?$")
_UNITTEST = re.compile(r"^(?:\S*/)?(?:python[0-9.]*|\{envpython\})\s+-m\s+(unittest|doctest)(\s.*)?$")


def read_text(path: Path) -> str:
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


def venv_of(root: Path) -> str | None:
    """The repository's virtualenv folder (`.venv`, …), or None."""
    return next((name for name in VENVS if (root / name / "bin" / "python").is_file()
                 and not (root / name).is_symlink()), None)


def python_of(root: Path) -> tuple[str, str]:
    """(the interpreter a Python gate names, why): the repository's virtualenv, else the Python on
    PATH now, both by absolute path."""
    name = venv_of(root)
    if name:
        return str((root / name / "bin" / "python").absolute()), f"the repository's virtualenv {name}/"
    found = _system_python()
    if found:
        return found, "the python3 on PATH (no virtualenv in the repository)"
    return "python3", "python3 (none found on PATH: name yours in .ai/project.yaml)"


def _system_python() -> str | None:
    """python3 on PATH, past pilothouse's own virtualenv (first on PATH after the README's install):
    a project's tests run with its own Python, never with pilothouse's dependencies."""
    import os
    import sys

    own = Path(sys.prefix) / "bin" if sys.prefix != sys.base_prefix else None
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and (own is None or Path(p) != own))
    return shutil.which("python3", path=path) or shutil.which("python", path=path)


def _clean(args: str) -> str:
    """tox's substitutions out of a command's arguments: {posargs} (or its default), {toxinidir}."""
    args = re.sub(r"\{posargs:([^}]*)\}", r"\1", args)
    args = args.replace("{posargs}", "").replace("{toxinidir}/", "").replace("{toxinidir}", ".")
    try:
        words = shlex.split(args, comments=True)
    except ValueError:
        return args.strip()
    return " ".join(shlex.quote(w) for w in words if not w.startswith("{"))


# pytest-cov's options, by what follows them: coverage writes its data file (.coverage) and the
# reports it is asked for (htmlcov/, coverage.xml, …) into the worktree, files the gate would leave
# behind, and --cov-fail-under fails a gate whose tests passed. Dropped whole, as a coverage wrapper
# is for npm (detect_node.py) and `coverage run -m pytest` is here.
_COV_VALUE = ("--cov-report", "--cov-config", "--cov-fail-under", "--cov-precision", "--cov-context")
_COV_FLAG = ("--cov-reset", "--cov-append", "--cov-branch", "--no-cov", "--no-cov-on-fail")


def _no_coverage(args: str) -> str:
    try:
        words = shlex.split(args)
    except ValueError:
        return args
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        name = w.split("=", 1)[0]
        if name == "--cov":  # its source is optional: the next word is it unless an option
            i += 1 if "=" in w or i + 1 >= len(words) or words[i + 1].startswith("-") else 2
        elif name in _COV_VALUE:
            i += 1 if "=" in w else 2
        elif w in _COV_FLAG:
            i += 1
        else:
            out.append(w)
            i += 1
    return " ".join(shlex.quote(w) for w in out)


def python_gate(root: Path, line: str) -> str | None:
    """The gate for one command line that runs pytest / unittest / doctest, the repository's Python
    in place of whichever it named; None when the line runs no test runner."""
    line = line.strip().lstrip("-").strip()
    py = shlex.quote(python_of(root)[0])
    m = _PYTEST.match(line)
    if m:
        args = _no_coverage(_clean(m.group(1) or ""))
        return f"{py} -m pytest{' ' + args if args else ''}"
    m = _UNITTEST.match(line)
    if m:
        args = _clean(m.group(2) or "")
        return f"{py} -m {m.group(1)}{' ' + args if args else ''}"
    return None


def _tox_config(root: Path) -> tuple[configparser.ConfigParser, str] | None:
    """(the tox settings, the file they are in): tox.ini, setup.cfg's [tox:tox], pyproject's
    legacy_tox_ini."""
    cp = configparser.ConfigParser(interpolation=None)
    for name, has in (("tox.ini", None), ("setup.cfg", "tox:tox"), ("pyproject.toml", "legacy_tox_ini")):
        text = read_text(root / name)
        if not text or (has and has not in text):
            continue
        if name == "pyproject.toml":
            import tomllib

            try:
                text = str(tomllib.loads(text).get("tool", {}).get("tox", {}).get("legacy_tox_ini", ""))
            except tomllib.TOMLDecodeError:
                continue
        try:
            cp.read_string(text)
        except configparser.Error:
            continue
        return cp, name
    return None


def tox_envs(root: Path) -> list[str]:
    """The envs tox runs by default (its envlist, braces expanded), then the other named ones."""
    found = _tox_config(root)
    if found is None:
        return []
    cp, _ = found
    listed = cp.get("tox", "envlist", fallback="") or cp.get("tox:tox", "envlist", fallback="")
    out: list[str] = []
    for item in re.split(r"[,\n]\s*(?![^{]*\})", listed):
        item = item.strip()
        m = re.match(r"(.*?)\{([^}]*)\}(.*)", item)
        out += [f"{m.group(1)}{x.strip()}{m.group(3)}" for x in m.group(2).split(",")] if m else [item] if item else []
    return out + [s.split(":", 1)[1] for s in cp.sections() if s.startswith("testenv:")
                  and s.split(":", 1)[1] not in out]


def tox_env(root: Path, env: str | None) -> tuple[str | None, str, bool]:
    """(the gate env `env` runs, where, whether it is lint-only): its test commands joined by `&&`,
    the repository's interpreter in place of tox's; (None, where, lint) when it runs no test."""
    found = _tox_config(root)
    if found is None:
        return None, "tox (no tox.ini)", False
    cp, file = found
    envs = tox_envs(root)
    env = env or next((e for e in envs if not LINT_NAMES.match(e)), None)
    section = f"testenv:{env}" if env and cp.has_section(f"testenv:{env}") else "testenv"
    where = f"{file} [{section}]" + (f" (env {env})" if env and section == "testenv" else "")
    if env and LINT_NAMES.match(env):
        return None, where, True
    raw = cp.get(section, "commands", fallback="") or ""
    if not raw and section != "testenv":
        raw = cp.get("testenv", "commands", fallback="") or ""
    factors = set(re.split(r"[-]", env or ""))
    gates = []
    for line in raw.replace("\\\n", " ").splitlines():
        m = re.match(r"^\s*([\w,!{}-]+):\s+(.*)$", line)
        if m:  # `py39: pytest …`: a line of some envs only
            if not (set(m.group(1).split(",")) & factors):
                continue
            line = m.group(2)
        gate = python_gate(root, line)
        if gate:
            gates.append(gate)
    return (" && ".join(gates) if gates else None), where, False


def nox_sessions(root: Path) -> list[tuple[str, str | None]]:
    """(session, its gate or None) for each `@nox.session` function of noxfile.py."""
    text = read_text(root / "noxfile.py")
    out: list[tuple[str, str | None]] = []
    for m in re.finditer(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def\s+(\w+)\s*\([^)]*\)[^:]*:(.*?)(?=\n@|\ndef\s|\Z)",
                         text, re.DOTALL):
        name, body = m.group(1), m.group(2)
        run = re.search(r"session\.run\(\s*[\"'](pytest|python)[\"']((?:\s*,\s*[\"'][^\"']*[\"'])*)", body)
        gate = None
        if run and not LINT_NAMES.match(name):
            words = [run.group(1), *re.findall(r"[\"']([^\"']*)[\"']", run.group(2))]
            gate = python_gate(root, " ".join(shlex.quote(w) for w in words))
        out.append((name, gate))
    return out
