"""scrub and the SQLite sessions a worker leaves (OpenCode's, Codex's state): a write-ahead log is
folded into its database before the files are masked, and the checkpoint that does it writes only
into the worker's own files, whatever the worker left beside them."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.providers.redact import Redactor
from pilothouse.providers.scrub import scrub_tree
from support import guard

KEY = "sk-canary-scrub-7a6b5c4d3e2f"


def test_a_sqlite_write_ahead_log_is_folded_in_so_no_transaction_is_lost(tmp_path: Path) -> None:
    """OpenCode keeps its session in SQLite with a WAL: masking a WAL frame breaks its checksum and
    SQLite would drop the session's last messages, so a resume would start over."""
    run = tmp_path / "run"
    run.mkdir()
    db = run / "opencode.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, v TEXT)")
    writer.execute("INSERT INTO part(v) VALUES ('before')")
    writer.execute("INSERT INTO part(v) VALUES (?)", (f"tool output: {KEY}",))
    writer.execute("INSERT INTO part(v) VALUES ('after')")
    wal = run / "opencode.db-wal"
    assert KEY.encode() in wal.read_bytes()
    copy = tmp_path / "copy"  # what is on disk once the worker is gone: the db and its WAL, unmerged
    copy.mkdir()
    for f in (db, wal):
        (copy / f.name).write_bytes(f.read_bytes())
    writer.close()
    assert scrub_tree(copy, Redactor([KEY])) == ["opencode.db"]
    with sqlite3.connect(copy / "opencode.db") as conn:
        rows = [v for (v,) in conn.execute("SELECT v FROM part ORDER BY id")]
    assert rows == ["before", "tool output: " + "*" * len(KEY), "after"]
    assert not any(KEY.encode() in f.read_bytes() for f in copy.iterdir())


def test_a_write_ahead_log_is_emptied_into_its_database_which_still_opens_with_every_row(tmp_path: Path) -> None:
    """The WAL is checkpointed for real (TRUNCATE): afterwards it is empty (or gone: the last
    connection to close removes it), the key sits masked in the database's own pages, and the
    database opens and reads every row, the WAL's included."""
    run = tmp_path / "run"
    (run / "storage").mkdir(parents=True)
    db = run / "storage" / "session.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE msg (id INTEGER PRIMARY KEY, v TEXT)")
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the table is in the database, the rows only in the WAL
    for v in ("first", f"the key is {KEY}", "last"):
        writer.execute("INSERT INTO msg(v) VALUES (?)", (v,))
    wal = run / "storage" / "session.db-wal"
    assert KEY.encode() in wal.read_bytes() and KEY.encode() not in db.read_bytes()
    # the worker is gone: what it left is the database and its WAL, not yet merged
    left = tmp_path / "left"
    (left / "storage").mkdir(parents=True)
    for f in (db, wal):
        (left / "storage" / f.name).write_bytes(f.read_bytes())
    writer.close()
    assert scrub_tree(left, Redactor([KEY])) == ["storage/session.db"]
    wal_left = left / "storage" / "session.db-wal"
    assert (wal_left.read_bytes() if wal_left.exists() else b"") == b""
    data = (left / "storage" / "session.db").read_bytes()
    assert KEY.encode() not in data and b"the key is " + b"*" * len(KEY) in data
    with sqlite3.connect(left / "storage" / "session.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = [v for (v,) in conn.execute("SELECT v FROM msg ORDER BY id")]
    assert rows == ["first", "the key is " + "*" * len(KEY), "last"]


_WAITS = re.compile(r"nanosleep\(.*?\{tv_sec=(\d+), tv_nsec=(\d+)\}")


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see how long SQLite is told to wait")
def test_a_database_a_live_process_keeps_locked_is_waited_for_2_s_then_masked_like_any_other_file(
        tmp_path: Path) -> None:
    """A dispatch that died may leave its worker holding the session's database: the checkpoint
    waits for the lock 2 s in all (SQLite's busy handler sleeps that long in steps: its requested
    sleeps, not a clock, are the measure), then gives up, and the WAL is masked like any file."""
    run = tmp_path / "run"
    run.mkdir()
    holder = sqlite3.connect(run / "session.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("CREATE TABLE msg (v TEXT)")
    holder.execute("INSERT INTO msg VALUES (?)", (f"the key is {KEY}",))
    holder.execute("BEGIN IMMEDIATE")  # a writer that never finishes: the WAL cannot be emptied
    try:
        log = tmp_path / "trace"
        code = ("import json, sys; from pathlib import Path; from pilothouse.providers.redact import Redactor; "
                "from pilothouse.providers.scrub import scrub_tree; "
                "print(json.dumps(scrub_tree(Path(sys.argv[1]), Redactor([sys.argv[2]]))))")
        done = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=nanosleep,clock_nanosleep",
                               sys.executable, "-c", code, str(run), KEY], capture_output=True, text=True,
                              timeout=guard(60))
        assert done.returncode == 0, done.stderr
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    waited = sum(int(s) * 10**9 + int(ns) for s, ns in _WAITS.findall(log.read_text()))
    assert waited == 2 * 10**9
    assert "session.db-wal" in json.loads(done.stdout)
    assert not any(KEY.encode() in f.read_bytes() for f in run.iterdir() if f.is_file())


def _wal_session(where: Path, name: str, rows: tuple[str, ...]) -> tuple[Path, Path]:
    """A WAL database at where/name whose rows are only in its WAL, as a worker that is gone left it
    (a copy of the database and its WAL taken while the writer still held them)."""
    scratch = where.parent / f".{where.name}-{name}-writer"
    scratch.mkdir()
    writer = sqlite3.connect(scratch / name, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE msg (v TEXT)")
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for v in rows:
        writer.execute("INSERT INTO msg VALUES (?)", (v,))
    for suffix in ("", "-wal"):
        (where / (name + suffix)).write_bytes((scratch / (name + suffix)).read_bytes())
    writer.close()
    shutil.rmtree(scratch)
    return where / name, where / f"{name}-wal"


def test_a_checkpoint_writes_into_no_file_a_hard_link_shares_with_a_place_outside_the_run_folder(
        tmp_path: Path) -> None:
    """SQLite writes a checkpoint in place: into the database, the WAL (emptied) and the -shm index.
    A worker that links one of the operator's files in under one of those names (its database
    beside a WAL of the worker's making, or any file as a -wal or -shm) must not get that file
    written: each is left as it was, and the key still goes from the run folder."""
    operator = tmp_path / "operator"
    operator.mkdir()
    with sqlite3.connect(operator / "state.db") as conn:
        conn.execute("CREATE TABLE msg (v TEXT)")
        conn.execute("INSERT INTO msg VALUES ('the operator''s row')")
    conn.close()
    (operator / "wal.txt").write_text("the operator's notes\n" * 50)
    (operator / "shm.txt").write_text("the operator's index\n" * 50)
    before = {f.name: f.read_bytes() for f in operator.iterdir()}
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    # its database is the operator's, its WAL the worker's (rows the worker chose, the key among them)
    worker_db, worker_wal = _wal_session(run / "data", "planted.db", ("drop everything", f"the key is {KEY}"))
    worker_db.unlink()
    os.link(operator / "state.db", worker_db)
    # the worker's own databases, with the operator's files as their WAL and their -shm
    own_db, own_wal = _wal_session(run / "data", "own.db", (f"the key is {KEY}",))
    own_wal.unlink()
    os.link(operator / "wal.txt", own_wal)
    shm_db, _ = _wal_session(run / "data", "shm.db", (f"the key is {KEY}",))
    os.link(operator / "shm.txt", run / "data" / "shm.db-shm")
    scrub_tree(run, Redactor([KEY]))
    assert {f.name: f.read_bytes() for f in operator.iterdir()} == before
    assert not [f for f in (run / "data").iterdir() if KEY.encode() in f.read_bytes()]


@pytest.mark.parametrize("planted", ["", "-wal", "-shm"])
def test_a_checkpoint_writes_into_no_operators_file_a_symbolic_link_names(tmp_path: Path, planted: str) -> None:
    """The same with a symbolic link in place of a hard link: the worker's session.db, its -wal or
    its -shm is a link to one of the operator's files (that file's only name). Nothing is written
    into the operator's file, and the key still goes from the run folder."""
    operator = tmp_path / "operator"
    operator.mkdir()
    with sqlite3.connect(operator / "state.db") as conn:
        conn.execute("CREATE TABLE msg (v TEXT)")
        conn.execute("INSERT INTO msg VALUES ('the operator''s row')")
    conn.close()
    (operator / "notes.txt").write_text("the operator's notes\n" * 50)
    before = {f.name: (f.read_bytes(), f.stat().st_nlink) for f in operator.iterdir()}
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    db, _ = _wal_session(run / "data", "session.db", ("drop everything", f"the key is {KEY}"))
    name = db.with_name(db.name + planted)
    name.unlink(missing_ok=True)
    name.symlink_to(operator / ("state.db" if not planted else "notes.txt"))
    scrub_tree(run, Redactor([KEY]))
    assert {f.name: (f.read_bytes(), f.stat().st_nlink) for f in operator.iterdir()} == before
    assert not [f for f in (run / "data").iterdir() if not f.is_symlink() and KEY.encode() in f.read_bytes()]
