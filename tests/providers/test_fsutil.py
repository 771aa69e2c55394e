"""read_in_tree: host-side reads of a worker-written tree never follow a link; the planner's repo
summary of a checkout a builder's link was merged into shows the link, not the file behind it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

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
        atomic_write_json(tmp_path / "data.json", {"b": 1, "a": 2})
        atomic_write_bytes(tmp_path / "key", b"k", 0o600)
        # callers name the mode and durability: each stays a keyword
        atomic_write_json(tmp_path / "kw.json", [1], mode=0o640, durable=False)
        atomic_write_text(tmp_path / "kw.txt", "t", mode=0o640, durable=False)
        atomic_write_bytes(tmp_path / "kw.bin", b"b", mode=0o640, durable=False)
        atomic_write_text(tmp_path / "new" / "deeper" / "f.txt", "f")  # its folders are made on the way
    finally:
        os.umask(old)
    assert outside.read_text() == "theirs\n" and (tmp_path / "linked.txt").read_text() == "ours\n"
    # indented, in the caller's key order and ending in a newline: a person reads and diffs these files
    assert (tmp_path / "data.json").read_text() == '{\n  "b": 1,\n  "a": 2\n}\n'
    assert json.loads((tmp_path / "kw.json").read_text()) == [1] and (tmp_path / "kw.txt").read_text() == "t"
    names = ("linked.txt", "data.json", "key", "kw.json", "kw.txt", "kw.bin")
    modes = {n: (tmp_path / n).stat().st_mode & 0o777 for n in names}
    assert modes == {"linked.txt": 0o644, "data.json": 0o644, "key": 0o600, "kw.json": 0o640, "kw.txt": 0o640,
                     "kw.bin": 0o640}
    assert (tmp_path / "new" / "deeper" / "f.txt").read_text() == "f"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted((*names, "outside.txt", "new"))


def test_a_database_locked_past_every_try_is_an_error_not_a_silent_journal(tmp_path: Path) -> None:
    import sqlite3

    from pilothouse.providers.fsutil import use_wal

    db = tmp_path / "state.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (v)")
    holder.execute("BEGIN EXCLUSIVE")  # another process mid-write, for longer than the tries last

    class Counted(sqlite3.Connection):
        asked = 0

        def execute(self, *args: Any) -> sqlite3.Cursor:
            self.asked += 1
            return super().execute(*args)

    try:
        conn = sqlite3.connect(db, timeout=0, isolation_level=None, factory=Counted)
        # an even count of tries, and enough of them that a wait gone negative (a ValueError) would show
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(conn, tries=6)
        assert conn.asked == 6  # every try made, and none after the last
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(conn)
        assert conn.asked == 6 + 100  # by default it gives up after 100 tries (about 5 s)
        conn.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    conn = sqlite3.connect(db, isolation_level=None)
    use_wal(conn, tries=3)  # once free, the switch holds
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


_FULL_DISK = """
import json, resource, signal, sys
from pathlib import Path
from pilothouse.providers.fsutil import atomic_write_bytes
target = Path(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    atomic_write_bytes(target, b"x" * 65536)
except OSError as exc:
    print(json.dumps([type(exc).__name__, exc.errno, exc.filename]))
"""


def test_a_write_that_fills_the_disk_names_the_file_and_leaves_the_old_one_and_no_temp(tmp_path: Path) -> None:
    import errno
    import sys

    target = tmp_path / "state.json"
    target.write_text("old\n")
    out = subprocess.run([sys.executable, "-c", _FULL_DISK, str(target)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["OSError", errno.EFBIG, str(target)]
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_rename_keeps_its_own_error_and_leaves_no_temp(tmp_path: Path) -> None:
    from pilothouse.providers.fsutil import atomic_write_text

    (tmp_path / "taken").mkdir()  # a directory where the file should go: the rename fails, naming both
    with pytest.raises(IsADirectoryError) as caught:
        atomic_write_text(tmp_path / "taken", "x")
    assert caught.value.filename2 == str(tmp_path / "taken") and caught.value.filename != str(tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize("at", ["write", "fsync", "chmod", "replace"])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_a_write_interrupted_at_any_step_leaves_the_old_file_and_no_temp(tmp_path: Path, at: str,
                                                                          interrupt: type[BaseException]) -> None:
    # Ctrl-C (or an exit) is no Exception: it must clean up as an error does. The profile hook
    # raises it as the step is called, the way a signal handler would at that moment.
    import sys

    from pilothouse.providers.fsutil import atomic_write_text

    target = tmp_path / "state.json"
    target.write_text("old\n")
    step = {"fsync": os.fsync, "chmod": os.chmod, "replace": os.replace}.get(at)

    def hook(frame: Any, event: str, arg: Any) -> None:
        # fsutil's own call only: a gc callback run meanwhile (Hypothesis keeps one) makes C calls
        # too, and an interrupt raised in it is only printed ("Exception ignored in gc_callback")
        if frame.f_globals.get("__name__") != "pilothouse.providers.fsutil":
            return
        if event == "c_call" and (arg is step or (at == "write" and getattr(arg, "__name__", "") == "write")):
            raise interrupt

    sys.setprofile(hook)
    try:
        with pytest.raises(interrupt):
            atomic_write_text(target, "new\n")
    finally:
        sys.setprofile(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert target.read_text() == "old\n"



_HOLD = """
import fcntl, sys
fh = open(sys.argv[1], "a+")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_a_lock_is_held_only_while_its_process_holds_it_and_looking_takes_nothing(tmp_path: Path) -> None:
    import fcntl
    import sys

    from pilothouse.providers.fsutil import lock_held

    lock = tmp_path / "running.lock"
    assert lock_held(lock) is False and not lock.exists()  # looking never makes the file
    lock.touch()
    assert lock_held(lock) is False
    with open(lock) as fh:  # after a look, the lock is free for the taking
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock_held(lock) is True
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    assert lock_held(lock) is False


def test_a_private_dir_is_made_with_its_parents_and_an_existing_one_is_closed_to_others(tmp_path: Path) -> None:
    from pilothouse.providers.fsutil import ensure_private_dir

    made = ensure_private_dir(tmp_path / "a" / "b")
    assert made == tmp_path / "a" / "b" and made.stat().st_mode & 0o777 == 0o700
    (tmp_path / "open").mkdir(mode=0o755)
    assert ensure_private_dir(tmp_path / "open").stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see the fsync calls")
def test_a_durable_write_is_synced_before_its_rename_and_a_quick_one_is_not(tmp_path: Path) -> None:
    import sys

    def syscalls(durable: bool | None) -> list[str]:
        how = "" if durable is None else f", durable={durable}"
        code = ("import sys; from pathlib import Path; from pilothouse.providers import fsutil; p = Path(sys.argv[1]); "
                f"fsutil.atomic_write_text(p, 'x'{how}); fsutil.atomic_write_bytes(p, b'x'{how}); "
                f"fsutil.atomic_write_json(p, 1{how})")
        log = tmp_path / f"trace-{durable}"
        out = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=fsync,fdatasync,rename,renameat,"
                              "renameat2", sys.executable, "-c", code, str(tmp_path / f"f-{durable}")],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return [ln.split("(", 1)[0].split()[-1] for ln in log.read_text().splitlines() if "(" in ln]

    durable = [("fsync" if c == "fsync" else "rename") for c in syscalls(None) if c == "fsync" or "rename" in c]
    assert durable == ["fsync", "rename"] * 3  # durable unless asked otherwise, each synced before its rename
    assert syscalls(True) == syscalls(None)
    assert "fsync" not in syscalls(False)


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640, 0o644], ids=oct)
def test_an_atomic_write_gives_the_temp_its_mode_before_the_rename_and_never_touches_the_final_path(
        tmp_path: Path, mode: int) -> None:
    # a reader must never find the file at its name with another mode (mkstemp's 0600 is looser
    # than 0400), and a chmod by name after the rename would follow a link swapped in there
    import sys

    final = tmp_path / "f"
    code = ("import sys; from pathlib import Path; from pilothouse.providers import fsutil; p = Path(sys.argv[1]); "
            f"fsutil.atomic_write_text(p, 'x', {mode}); fsutil.atomic_write_bytes(p, b'x', {mode}); "
            f"fsutil.atomic_write_json(p, 1, {mode})")
    log = tmp_path / "trace"
    out = subprocess.run(["strace", "-f", "-qq", "-o", str(log), "-e", "trace=chmod,fchmod,fchmodat,rename,renameat,"
                          "renameat2", sys.executable, "-c", code, str(final)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    calls = [ln.split(None, 1)[1] for ln in log.read_text().splitlines() if "chmod" in ln or "rename" in ln]
    assert len(calls) == 6, calls  # each write: one mode change, then one rename
    for change, rename in zip(calls[::2], calls[1::2], strict=True):
        assert "chmod" in change and change.endswith(f", 0{mode:o}) = 0"), calls
        assert "rename" in rename and rename.endswith(f'"{final}") = 0'), calls
        assert f'"{final}"' not in change, calls  # the temp's mode, set before it takes the name
        if '"' in change:  # by name (not fchmod on its fd): the very file that is then renamed
            temp = change.split('"')[1]
            assert rename.startswith(f'rename("{temp}", ') or f', "{temp}", ' in rename, calls
    assert final.stat().st_mode & 0o777 == mode
