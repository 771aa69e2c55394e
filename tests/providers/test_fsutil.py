"""read_in_tree: host-side reads of a worker-written tree never follow a link; the planner's repo
summary of a checkout a builder's link was merged into shows the link, not the file behind it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.records.jobs import create_job
from pilothouse.core.state import store
from pilothouse.core.supervisor import control as supervisor_ctl
from pilothouse.providers.workerfs import read_in_tree

SECRET = "operator-secret-3f9c2a"


def test_a_link_anywhere_on_the_path_is_reported_with_its_target_and_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    tree = tmp_path / "tree"
    (tree / "docs").mkdir(parents=True)
    (tree / "docs" / "guide.md").write_text("hello\n")
    os.symlink(outside / "secret.txt", tree / "README.md")
    os.symlink(outside, tree / "up")
    os.symlink("../outside/secret.txt", tree / "docs" / "rel.md")

    assert read_in_tree(tree, "docs/guide.md", 100).text() == "hello\n"
    link = read_in_tree(tree, "README.md", 100)
    assert (link.kind, link.at) == ("link", "README.md") and SECRET not in link.text()
    assert str(outside / "secret.txt") in link.text() and "not followed" in link.text()
    through = read_in_tree(tree, "up/secret.txt", 100)  # a linked directory on the way
    assert (through.kind, through.at) == ("link", "up") and SECRET not in through.text()
    assert read_in_tree(tree, "docs/rel.md", 100).kind == "link"
    assert read_in_tree(tree, "nothing.md", 100).kind == "missing"
    for bad in ("../outside/secret.txt", str(outside / "secret.txt"), "docs/../README.md"):
        with pytest.raises(ValueError):
            read_in_tree(tree, bad, 100)


def test_a_fifo_is_not_opened_and_a_big_file_is_read_only_to_its_limit(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # reading it would block the supervisor for ever
    assert read_in_tree(tmp_path, "pipe", 10).kind == "other"
    (tmp_path / "big").write_bytes(b"x" * 5000)
    entry = read_in_tree(tmp_path, "big", 10)
    assert (entry.data, entry.truncated) == (b"x" * 10, True)


def _scenario(secret: Path) -> dict[str, object]:
    def plan(task: str, path: str) -> str:
        tasks = [{"id": task, "title": "T", "kind": "SAFE_PARALLEL", "expected_paths": {"write": [path]}}]
        return f"<!--RESULT-->{json.dumps({'tasks': tasks})}<!--/RESULT-->"

    def done(path: str) -> str:
        result = {"status": "complete", "files_changed": [path], "validation": {"commands": [], "passed": True},
                  "risks": []}
        return f"<!--RESULT-->{json.dumps(result)}<!--/RESULT-->"

    return {"name": "readme-link", "description": "a builder commits README.md as a link to a file outside",
            "scripts": [
                {"match": {"mode": "plan", "contains": ["job: second"]}, "turns": [{"say": plan("notes", "notes.txt")}]},
                {"match": {"mode": "plan"}, "turns": [{"say": plan("readme", "README.md")}]},
                {"match": {"mode": "code", "contains": ["task: readme"]}, "turns": [
                    {"say": "Pointing the README at the shared one.",
                     "actions": [{"bash": {"command": f"ln -sfn {secret} README.md", "description": "link"}}]},
                    {"say": done("README.md")}]},
                {"match": {"mode": "code"}, "turns": [
                    {"say": "Notes.", "actions": [{"write": {"path": "notes.txt", "content": "n\n"}}]},
                    {"say": done("notes.txt")}]},
            ]}


def test_the_planners_summary_shows_a_merged_link_to_a_secret_as_a_link(tmp_path: Path, cli) -> None:
    secret = tmp_path / "private" / "secret.txt"  # the operator's, outside every repository
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    scenario = tmp_path / "readme-link.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(secret)))
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.update(gates={"fast": "true", "full": "true"}, workflow={"mode": "feature", "review": "off"})
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
        merged = subprocess.run(["git", "ls-tree", "pilothouse/integration/demo", "README.md"], cwd=layout.root,
                                capture_output=True, text=True, check=True).stdout
        assert merged.startswith("120000"), merged  # the link is on the job's integration line
        # jobs are isolated: the next job starts from the base branch, so the link reaches it once shipped
        shipped = cli("ship", "demo", "--repo", str(layout.root))
        assert shipped.returncode == 0, shipped.stdout + shipped.stderr
        create_job(layout, "second", "Add a notes file.", "notes.txt exists")
        w = cli("job", "wait", "second", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    conn = store.connect(layout.state_db, readonly=True)
    [run] = [r["run_id"] for r in conn.execute("SELECT run_id FROM runs WHERE job='second' AND role='assigner'")]
    conn.close()
    text = (layout.runtime / "runs" / f"{run}.task.md").read_text()
    assert f"README.md -> {secret} (a symbolic link, not followed)" in text
    assert SECRET not in text
    leaked = [p for p in (layout.runtime / "runs").iterdir() if SECRET in p.read_text(errors="replace")]
    assert not leaked


def test_connections_opening_a_new_database_at_once_all_get_it_in_wal_mode(tmp_path: Path) -> None:
    """The email watcher's two threads open email.db together on first use: the loser of the WAL
    switch got `database is locked` at once (no busy wait), about one start in four."""
    import sqlite3
    import threading

    from pilothouse.providers.fsutil import use_wal

    failures: list[str] = []
    for n in range(60):
        path = tmp_path / f"{n}.db"
        barrier = threading.Barrier(3)

        def open_it(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
            try:
                barrier.wait()
                use_wal(conn)
                conn.executescript("CREATE TABLE IF NOT EXISTS queued (id INTEGER PRIMARY KEY);")
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                failures.append(f"{path.name}: {exc}")
            finally:
                conn.close()

        threads = [threading.Thread(target=open_it) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


def test_an_atomic_write_replaces_a_hard_link_and_gets_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    from pilothouse.providers.fsutil import atomic_write_bytes, atomic_write_json, atomic_write_text

    outside = tmp_path / "outside.txt"
    outside.write_text("theirs\n")
    os.link(outside, tmp_path / "linked.txt")  # a worker's hard link to a file elsewhere
    old = os.umask(0o077)
    try:
        atomic_write_text(tmp_path / "linked.txt", "ours\n")
        atomic_write_json(tmp_path / "data.json", {"a": 1})
        atomic_write_bytes(tmp_path / "key", b"k", 0o600)
    finally:
        os.umask(old)
    assert outside.read_text() == "theirs\n" and (tmp_path / "linked.txt").read_text() == "ours\n"
    assert json.loads((tmp_path / "data.json").read_text()) == {"a": 1}
    modes = {n: (tmp_path / n).stat().st_mode & 0o777 for n in ("linked.txt", "data.json", "key")}
    assert modes == {"linked.txt": 0o644, "data.json": 0o644, "key": 0o600}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.json", "key", "linked.txt", "outside.txt"]


def test_a_database_locked_past_every_try_is_an_error_not_a_silent_journal(tmp_path: Path) -> None:
    import sqlite3

    from pilothouse.providers.fsutil import use_wal

    db = tmp_path / "state.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (v)")
    holder.execute("BEGIN EXCLUSIVE")  # another process mid-write, for longer than the tries last
    try:
        conn = sqlite3.connect(db, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(conn, tries=3)
        conn.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    conn = sqlite3.connect(db, isolation_level=None)
    use_wal(conn, tries=3)  # once free, the switch holds
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
