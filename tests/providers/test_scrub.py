"""No raw key at rest: a run folder is redacted when its run ends, whatever the worker did with its key."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import yaml
from pilothouse.providers import paths
from pilothouse.providers.redact import REDACTED, Redactor, secret_forms
from pilothouse.providers.scrub import scrub_tree
from support import guard

KEY = "sk-canary-scrub-7a6b5c4d3e2f"

READS_ITS_KEY = """
name: reads-its-key
description: the builder prints its own credential (raw and base64) into its session, then does the task
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["one.txt"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Looking at my credential"
        actions:
          - bash: {command: "cat \\"$HOME/../credential\\"; base64 -w0 \\"$HOME/../credential\\"; cat \\"$HOME/../credential\\" > \\"$HOME/.keep\\""}
      - say: "Writing one.txt"
        actions:
          - write: {path: one.txt, content: "one\\n"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["one.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _files_holding(base: Path, forms: list[bytes]) -> list[str]:
    hits = []
    secrets = paths.secrets_dir()
    for f in base.rglob("*"):
        if f.is_symlink() or not f.is_file() or f.is_relative_to(secrets):
            continue
        data = f.read_bytes()
        hits += [str(f) for form in forms if form in data]
    return sorted(set(hits))


def test_a_worker_that_reads_its_credential_leaves_no_key_in_its_run_folder(tmp_path: Path, cli) -> None:
    from pilothouse.core import demo

    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=KEY + "\n").returncode == 0
    scenario = tmp_path / "reads.yaml"
    scenario.write_text(READS_ITS_KEY)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in layout.events.read_text().splitlines()]
    assert any(e["type"] == "task.state" and e["data"]["to"] == "done" for e in events)
    # the worker did read it: its session recorded the tool result (now redacted)
    runs = list(paths.providers_dir().glob("sim/runs/*"))
    assert any(REDACTED in p.read_text(errors="replace") for r in runs for p in r.rglob("conversation.json"))
    forms = [f.encode() for f in secret_forms(KEY)]
    assert _files_holding(Path(os.environ["PILOTHOUSE_HOME"]), forms) == []
    assert _files_holding(layout.ai, forms) == []
    latest = (paths.logs_dir() / "latest.log").read_text()
    assert "redacted a key the worker left in" in latest and ".keep" in latest


def test_binary_files_keep_their_length_so_a_sqlite_session_still_opens(tmp_path: Path) -> None:
    db = tmp_path / "run" / "state" / "session.sqlite"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.execute("INSERT INTO t VALUES (?)", (f"Bearer {KEY} end",))
    (tmp_path / "run" / "notes.json").write_text(json.dumps({"out": KEY}))
    outside = tmp_path / "outside.txt"
    outside.write_text(KEY)
    (tmp_path / "run" / "link").symlink_to(outside)
    changed = scrub_tree(tmp_path / "run", Redactor([KEY]))
    assert sorted(changed) == ["notes.json", "state/session.sqlite"]
    with sqlite3.connect(db) as conn:
        [(value,)] = conn.execute("SELECT v FROM t").fetchall()
    assert value == "Bearer " + "*" * len(KEY) + " end"
    assert json.loads((tmp_path / "run" / "notes.json").read_text()) == {"out": REDACTED}
    assert outside.read_text() == KEY  # a symlink is never followed


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


def test_a_resumed_runs_link_is_followed_only_to_a_sibling_run_folder(tmp_path: Path) -> None:
    """A resumed run's id is a link to the original run's folder. The link sits where the worker's
    files do: one pointing out of the runs directory must not make the scrub rewrite that folder."""
    from pilothouse.providers.sandbox import runs_dir
    from pilothouse.providers.scrub import scrub_run

    runs = runs_dir("sim")
    (runs / "run-1" / "home").mkdir(parents=True)
    (runs / "run-1" / "home" / "session.json").write_text(json.dumps({"out": KEY}))
    (runs / "run-1" / "credential").write_text(KEY)  # the run's own key file is left to its owner
    (runs / "run-2").symlink_to(runs / "run-1")
    outside = tmp_path / "elsewhere"
    (outside / "home").mkdir(parents=True)
    (outside / "notes.txt").write_text(KEY)
    (runs / "run-3").symlink_to(outside)
    (runs / "run-4").symlink_to(runs / "run-1" / "home")  # inside the runs dir, but no run folder
    other = runs_dir("other") / "run-9"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text(KEY)
    (runs / "run-5").symlink_to(other)  # another provider's run
    redactor = Redactor([KEY])
    for run_id in ("run-3", "run-4", "run-5", "../other/runs/run-9", ".", ""):
        assert scrub_run("sim", run_id, redactor) == [], run_id
    assert (outside / "notes.txt").read_text() == KEY
    assert (other / "notes.txt").read_text() == KEY
    assert json.loads((runs / "run-1" / "home" / "session.json").read_text()) == {"out": KEY}
    assert scrub_run("sim", "run-2", redactor) == ["home/session.json"]
    assert json.loads((runs / "run-1" / "home" / "session.json").read_text()) == {"out": REDACTED}
    assert (runs / "run-1" / "credential").read_text() == KEY


def test_a_nul_in_the_first_8192_bytes_makes_a_file_binary_and_a_read_only_file_is_rewritten_owner_writable(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "binary").write_bytes(b"a" * 8191 + b"\0" + KEY.encode())
    (run / "text").write_bytes(b"a" * 8192 + b"\0" + KEY.encode())  # the NUL is past the probe
    (run / "text").chmod(0o400)  # the worker's own file, left read-only
    assert sorted(scrub_tree(run, Redactor([KEY]))) == ["binary", "text"]
    assert (run / "binary").read_bytes() == b"a" * 8191 + b"\0" + b"*" * len(KEY)
    assert (run / "text").read_bytes() == b"a" * 8192 + b"\0" + REDACTED.encode()
    assert (run / "text").stat().st_mode & 0o777 == 0o600


def test_a_file_too_big_to_rewrite_that_holds_a_key_anywhere_is_removed_and_one_without_is_kept(
        tmp_path: Path) -> None:
    # sparse files past the in-memory limit: the key sits past it, across the limit itself, and across
    # the boundary between two of the chunks the rest is searched in
    from pilothouse.providers.scrub import MAX_FILE_BYTES

    run = tmp_path / "run"
    run.mkdir()
    key = KEY.encode()
    spots = {"past": MAX_FILE_BYTES + 4096, "across-limit": MAX_FILE_BYTES - 5,
             "across-chunks": MAX_FILE_BYTES + 1 + (1 << 20) - 7}
    for name, at in spots.items():
        with open(run / name, "wb") as fh:
            fh.seek(at)
            fh.write(key + b"\n")
    with open(run / "clean", "wb") as fh:
        fh.seek(MAX_FILE_BYTES + (3 << 20))
        fh.write(b"nothing to hide\n")
    assert sorted(scrub_tree(run, Redactor([KEY]))) == sorted(spots)
    assert sorted(p.name for p in run.iterdir()) == ["clean"]
    assert (run / "clean").stat().st_size == MAX_FILE_BYTES + (3 << 20) + 16
