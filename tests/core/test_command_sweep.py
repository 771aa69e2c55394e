"""A table-driven sweep over every command and subcommand of the real parser (core/cli.py): each
runs as a real process with bad arguments (a name past every limit, a control character) and
against damaged record and state files, and each case is classified as success, one-line error,
traceback, hang or wrong state. Anything but the first two fails the sweep.

The named cases (the ones an operator's bad day found) run with every suite; the whole sweep —
every subcommand, every damage — is `slow`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HANG_S = 40  # a command still running after this is a hang
LONG = "a" * 300
CONTROL = "bad\x1b[31mname"
# what an empty answer looks like: said with a damaged store, it is a silent wrong answer
EMPTY_ANSWERS = ("not started", "no open problems", "no jobs yet")
# commands that serve or follow until stopped: swept only with a bad value for one of their options
FOLLOWERS = {"view", "mcp", "serve", "live", "sim serve", "run", "notify watch", "job wait", "demo"}
BAD_OPTIONS = ("--job", "--scenario", "--host", "--jobs", "--repo", "--max-workers")


def classify(r: subprocess.CompletedProcess[str] | None, *, damaged: bool = False) -> str:
    if r is None:
        return "hang"
    if "Traceback (most recent call last)" in r.stderr or "Traceback (most recent call last)" in r.stdout:
        return "traceback"
    if damaged and r.returncode == 0 and any(w in r.stdout for w in EMPTY_ANSWERS):
        return "wrong state"
    if r.returncode == 0:
        return "success"
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    if len(lines) == 1 or (lines and "error:" in lines[-1] and lines[0].startswith("usage:")):
        return "one-line error"  # ours, or argparse's usage followed by its one error line
    return "traceback" if not lines else f"{len(lines)} lines of error"


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([sys.executable, "-m", "pilothouse", *argv], cwd=cwd, capture_output=True,
                              text=True, timeout=HANG_S, stdin=subprocess.DEVNULL, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return None


def leaves() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """("job status", its parser) for every command and subcommand the real parser has."""
    from pilothouse.core.cli import build_parser

    def walk(prefix: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield prefix, parser
            return
        seen: set[int] = set()
        for name, child in subs[0].choices.items():
            if id(child) in seen:
                continue  # an alias
            seen.add(id(child))
            yield from walk(f"{prefix} {name}".strip(), child)

    yield from walk("", build_parser())


def bad_argvs(command: str, parser: argparse.ArgumentParser, value: str) -> list[list[str]]:
    """The command with `value` for every positional, and with `value` for each option that names
    something a path or address is built from."""
    positionals = [a for a in parser._actions if not a.option_strings and a.nargs != 0
                   and not isinstance(a, argparse._SubParsersAction)]
    options = {s for a in parser._actions for s in a.option_strings}
    base = command.split()
    out = []
    if positionals and command not in FOLLOWERS:
        out.append(base + [value] * len(positionals))
    for opt in BAD_OPTIONS:
        if opt in options:
            required = [value] * len(positionals)
            out.append(base + required + [opt, value if opt != "--max-workers" else "1" + "0" * 23])
    return out


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support import isolated_env, run_cli

    base = tmp_path_factory.mktemp("sweep")
    root = base / "repo"
    root.mkdir()
    env = {**os.environ, **isolated_env(base)}  # a module's fixture runs before any test's own home is set
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    (root / "README.md").write_text("sweep\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=root, check=True, env=env)
    assert run_cli("init", "--gate-fast", "true", cwd=root, env=env).returncode == 0
    (root / "req.md").write_text("do a thing\n")
    assert run_cli("job", "create", "one", "--request-file", "req.md", cwd=root, env=env).returncode == 0
    return root


# the cases an operator's bad day found, by name
NAMED = [
    ["job", "decide", LONG, "why"], ["job", "update", LONG, "--request-file", "req.md"], ["live", "--job", LONG],
    ["events", "--job", LONG], ["demo", "--scenario", LONG], ["providers", "check", "--scenario", LONG],
    ["sim", "serve", "--scenario", LONG], ["serve", "--host", LONG], ["fanout", "--jobs", "."],
    ["job", "status", CONTROL], ["problem", "act", LONG, "retry"], ["job", "start", "--max-workers", "1" + "0" * 23],
]


@pytest.mark.parametrize("argv", NAMED, ids=[" ".join(a)[:40] for a in NAMED])
def test_a_named_bad_argument_is_one_line(repo: Path, argv: list[str]) -> None:
    r = run(argv, repo)
    assert classify(r) == "one-line error", (r.returncode, r.stdout[-500:], r.stderr[-2000:]) if r else "hang"


RECORD_DAMAGE = {
    "a FIFO": lambda p: os.mkfifo(p),
    "a link to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
    "a directory": lambda p: p.mkdir(),
    "not JSON": lambda p: p.write_bytes(b"\xff\xfe{{{"),
}
READERS = (["job", "status"], ["job", "list"], ["job", "status", "one"], ["problem", "list"], ["check"],
           ["maintain", "repair"], ["events"], ["live", "--once"])


@pytest.mark.parametrize("kind", list(RECORD_DAMAGE))
def test_a_damaged_job_record_never_hangs_a_reader(repo: Path, kind: str) -> None:
    record = repo / ".ai/jobs/one.json"
    kept = record.read_bytes()
    record.unlink()
    RECORD_DAMAGE[kind](record)
    try:
        found = {" ".join(argv): classify(run(argv, repo)) for argv in READERS}
    finally:
        record.rmdir() if record.is_dir() and not record.is_symlink() else record.unlink()
        record.write_bytes(kept)
    assert all(c in ("success", "one-line error") for c in found.values()), found


@pytest.mark.slow
def test_every_command_with_bad_arguments_is_success_or_one_line(repo: Path) -> None:
    cases = [argv for command, parser in leaves() for value in (LONG, CONTROL)
             for argv in bad_argvs(command, parser, value)]
    assert len(cases) > 100  # the parser really was walked
    results = {" ".join(a)[:120]: classify(run(a, repo)) for a in cases}
    bad = {k: v for k, v in results.items() if v not in ("success", "one-line error")}
    assert not bad, bad


@pytest.mark.slow
def test_every_state_damage_is_named_by_every_reader(tmp_path: Path) -> None:
    from support import run_cli
    from test_damaged_store import DAMAGE

    root = tmp_path / "scratch"
    out = run_cli("demo", "--follow", "--dir", str(root), "--scenario", "skip", timeout=150)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    assert run_cli("job", "stop", "--repo", str(root)).returncode == 0
    db = root / ".ai/runtime/state.db"
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    good = db.read_bytes()
    results: dict[str, str] = {}
    for kind, (damage, _words) in DAMAGE.items():
        for p in [db, *db.parent.glob("state.db-*")]:
            p.unlink(missing_ok=True)
        db.write_bytes(good)
        damage(db)
        for argv in READERS + (["job", "start"], ["why", "demo"], ["usage"], ["task", "list"]):
            if argv == ["maintain", "repair"]:
                continue  # it mends the store: the damage would be gone for the next reader
            results[f"{kind}: {' '.join(argv)}"] = classify(run(argv, root), damaged=True)
        for p in [db, *db.parent.glob("state.db*")]:
            if p.is_symlink() or p.exists():
                p.unlink()
    bad = {k: v for k, v in results.items() if v not in ("success", "one-line error")}
    assert not bad, bad


READ_ONLY = (["job", "status"], ["job", "list"], ["problem", "list"], ["problem", "show", "KTRWMB"],
             ["problem", "act", "KTRWMB", "retry"], ["check"], ["events"], ["why", "x"], ["usage"],
             ["task", "list"], ["maintain", "repair"], ["live", "--once"], ["models"])


def test_read_only_commands_create_nothing_where_pilothouse_never_ran(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    found = {" ".join(argv): classify(run(argv, root)) for argv in READ_ONLY}
    assert all(c in ("success", "one-line error") for c in found.values()), found
    assert not (root / ".ai").exists(), sorted(str(p.relative_to(root)) for p in (root / ".ai").rglob("*"))
