"""Every reader tells a damaged store from an empty one (core/state/store.py): a job really blocked
on an open problem, its state.db then deleted, emptied, replaced, dropped a table, pointed at a
device or a FIFO, stamped by another version or held locked — `job status`, `job list`, `problem
list`, `check` and `job start` each give one line naming the damage and the repair, never "not
started" or "no open problems"; `maintain repair` brings the problem back."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import guard, until

READERS = (("job", "status"), ("job", "list"), ("problem", "list"), ("check",), ("job", "start"))


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, str]:
    """A demo job blocked on a builder_blocked problem, its supervisor stopped: (repo, its store, the code)."""
    from support import isolated_env, run_cli

    base = tmp_path_factory.mktemp("damaged")
    root = base / "scratch"
    env = isolated_env(base)  # a module's fixture runs before any test's own home is set
    out = run_cli("demo", "--follow", "--dir", str(root), "--scenario", "skip", timeout=150, env=env)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    assert run_cli("job", "stop", "--repo", str(root), env=env).returncode == 0
    problems = json.loads(run_cli("problem", "list", "--json", "--repo", str(root), env=env).stdout)
    db = root / ".ai/runtime/state.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return root, db.read_bytes(), problems[0]["code"]


def _restore(root: Path, good: bytes) -> Path:
    db = root / ".ai/runtime/state.db"
    for p in [db, *db.parent.glob("state.db-*"), *db.parent.glob("state.db.damaged-*")]:
        if p.is_symlink() or p.exists():
            p.unlink()
    db.write_bytes(good)
    return db


def _sql(*statements: str) -> Callable[[Path], None]:
    def damage(db: Path) -> None:
        conn = sqlite3.connect(db)
        for s in statements:
            conn.execute(s)
        conn.commit()
        conn.close()
    return damage


def _replace(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(db: Path) -> None:
        db.unlink()
        make(db)
    return damage


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deleted": (lambda db: db.unlink(), "is missing"),
    "zero bytes": (lambda db: db.write_bytes(b""), "is empty"),
    "garbage": (lambda db: db.write_bytes(b"not sqlite " * 500), "not a usable state database"),
    "another application": (_replace(_sql("CREATE TABLE t(x)", "PRAGMA application_id=1234")),
                            "belongs to another program"),
    "another SQLite file": (_replace(_sql("CREATE TABLE notes(x)")), "another program's SQLite database"),
    "/dev/zero": (_replace(lambda db: db.symlink_to("/dev/zero")), "is a device"),
    "a FIFO": (_replace(lambda db: os.mkfifo(db)), "is a FIFO"),
    "dropped table": (_sql("DROP TABLE problems"), "lost its table(s) problems"),
    "user_version 999": (_sql("PRAGMA user_version=999"), "another pilothouse version"),
    "rows lost": (_sql("DELETE FROM jobs_state", "DELETE FROM problems", "DELETE FROM tasks"),
                  "has lost what .ai/jobs/ and events.jsonl say it holds"),
}


def _one_line(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not started" not in r.stdout and "no open problems" not in r.stdout
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_store_is_named_by_every_reader_and_repair_brings_the_problem_back(
        blocked: tuple[Path, bytes, str], kind: str, cli: Any) -> None:
    root, good, code = blocked
    db = _restore(root, good)
    damage, words = DAMAGE[kind]
    damage(db)
    for argv in READERS:
        _one_line(cli(*argv, "--repo", str(root), timeout=60), words, "maintain repair")
    r = cli("maintain", "repair", "--repo", str(root))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rebuilt 1 job(s) (demo)" in r.stdout and "1 open problem(s)" in r.stdout
    listed = json.loads(cli("problem", "list", "--json", "--repo", str(root)).stdout)
    assert [p["code"] for p in listed] == [code]
    status = json.loads(cli("job", "status", "demo", "--json", "--repo", str(root)).stdout)
    assert status["state"] == "blocked"


def test_a_sound_store_needs_no_repair_and_gets_its_identity(blocked: tuple[Path, bytes, str], cli: Any) -> None:
    root, good, _ = blocked
    db = _restore(root, good)
    r = cli("maintain", "repair", "--repo", str(root))
    assert r.returncode == 2 and "nothing to repair" in r.stderr, r.stdout + r.stderr
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x50485354
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT value FROM meta WHERE key='repo'").fetchone()[0] == str(root)
    conn.close()


def test_a_store_held_locked_names_the_holder_after_a_bounded_wait(blocked: tuple[Path, bytes, str],
                                                                   cli: Any) -> None:
    root, good, _ = blocked
    db = _restore(root, good)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
         "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE')\n"
         "c.execute('UPDATE meta SET value=value'); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        for argv in (("job", "status"), ("problem", "list")):
            _one_line(cli(*argv, "--repo", str(root), timeout=60), "is locked by another process",
                      f"pid {holder.pid}")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=guard(30))
    assert cli("job", "status", "--repo", str(root)).returncode == 0


@pytest.mark.slow
def test_the_supervisor_outlasts_a_held_write_lock_and_beats_again(blocked: tuple[Path, bytes, str],
                                                                   cli: Any) -> None:

    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.state.events import EventTailer
    from pilothouse.core.supervisor import control

    root, good, _ = blocked
    db = _restore(root, good)
    layout = RepoLayout(root)
    assert cli("job", "start", "--repo", str(root)).returncode == 0
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c", "import sqlite3, sys\n"
             f"c = sqlite3.connect({str(db)!r}, isolation_level=None, timeout=60)\n"
             "c.execute('BEGIN IMMEDIATE'); c.execute('UPDATE meta SET value=value')\n"
             "print('held', flush=True); sys.stdin.read(); c.execute('COMMIT')"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"

        def says(pred: Any) -> Any:
            def check() -> Any:
                assert control.status(layout) is not None, layout.supervisor_log.read_text()[-3000:]
                return pred()
            return check

        # its heartbeat meets the lock, says who holds it, and waits instead of dying
        until(says(lambda: f"pid {holder.pid}" in layout.supervisor_log.read_text()),
              "the supervisor named the lock's holder", every=0.2)
        tail = EventTailer(layout.events, start_at_end=True)
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=guard(30)) == 0
        until(says(lambda: any(e["type"] == "supervisor.heartbeat" for e in tail.read_new())),
              "the supervisor beat again", every=0.2)
        assert "Traceback" not in layout.supervisor_log.read_text()
    finally:
        cli("job", "stop", "--repo", str(root))


def test_a_read_only_ai_folder_is_said_as_read_only_not_as_damage(blocked: tuple[Path, bytes, str]) -> None:
    import shutil

    root, good, _ = blocked
    _restore(root, good)
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap is needed: apt-get install bubblewrap"
    ai = str(root / ".ai")
    for argv in (("job", "status"), ("problem", "list"), ("problem", "act", "XXXXXX", "retry")):
        r = subprocess.run([bwrap, "--dev-bind", "/", "/", "--ro-bind", ai, ai, sys.executable, "-m", "pilothouse",
                            *argv, "--repo", str(root)], capture_output=True, text=True, timeout=guard(60))
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
        assert "read-only" in r.stderr and "maintain repair" not in r.stderr, r.stderr


def _line(seq: int, type_: str, **data: Any) -> bytes:
    return json.dumps({"seq": seq, "ts": "2026-12-01T08:00:00.000Z", "type": type_, "job": "j", "task": None,
                       "run": None, "data": data}).encode() + b"\n"


def test_a_missing_store_is_lost_only_when_a_real_supervisor_started_line_says_so(tmp_path: Path) -> None:
    """Text that mentions supervisor.started (a worker's words in an activity line) is no witness; a
    supervisor.started line still being written is one once it is whole; a log put anew is read anew."""
    from pilothouse.core.state.store import StateDamaged, open_reader

    runtime = tmp_path / ".ai/runtime"
    runtime.mkdir(parents=True)
    events, db = runtime / "events.jsonl", runtime / "state.db"
    said = _line(1, "run.activity", text='{"type":"supervisor.started"} supervisor.started')
    events.write_bytes(said + _line(2, "run.finished")[:-1].replace(b"run.finished", b"supervisor.started"))
    assert open_reader(db) is None  # the mention is a string, the last line is not whole yet: nothing ran here
    assert open_reader(db) is None  # asked again (the cockpit asks on every footer): the same answer
    with open(events, "ab") as fh:
        fh.write(b"\n")  # the supervisor's line is whole now
    with pytest.raises(StateDamaged, match="is missing but .*shows a supervisor ran here"):
        open_reader(db)
    events.unlink()
    events.write_bytes(said)  # a new log under the name: what was read of the old one says nothing of it
    assert open_reader(db) is None
    os.replace(events, runtime / "old.jsonl")
    (runtime / "new.jsonl").write_bytes(said + _line(2, "supervisor.started"))
    os.replace(runtime / "new.jsonl", events)
    with pytest.raises(StateDamaged, match="is missing but"):
        open_reader(db)
