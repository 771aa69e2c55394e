"""The door to worker-written trees: what a worker planted (links, FIFOs, hard links, a folder
swapped for a link) is replaced or skipped, never followed, written through or blocked on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.providers import workerfs
from support import guard


def _operator_file(tmp_path: Path) -> tuple[Path, bytes]:
    target = tmp_path / "operator" / "settings.json"
    target.parent.mkdir()
    target.write_bytes(b'{"operator": true}\n')
    return target, target.read_bytes()


def test_write_replaces_a_planted_folder_link_instead_of_writing_through_it(tmp_path):
    target, before = _operator_file(tmp_path)
    config = tmp_path / "run" / "config"
    config.mkdir(parents=True)
    (config / "claude").symlink_to(target.parent)
    workerfs.write(config, "claude/settings.json", "{}\n")
    assert target.read_bytes() == before
    assert not (config / "claude").is_symlink() and (config / "claude" / "settings.json").read_text() == "{}\n"
    assert (config / "claude").stat().st_mode & 0o777 == 0o700


def test_write_replaces_a_planted_file_link_and_a_hard_link(tmp_path):
    target, before = _operator_file(tmp_path)
    d = tmp_path / "run"
    d.mkdir()
    (d / "settings.json").symlink_to(target)
    os.link(target, d / "hard.json")
    workerfs.write(d, "settings.json", "mine\n")
    workerfs.write(d, "hard.json", "mine\n")
    assert target.read_bytes() == before
    assert (d / "settings.json").read_text() == "mine\n" and not (d / "settings.json").is_symlink()


def test_write_replaces_a_folder_put_where_the_hosts_file_goes(tmp_path):
    d = tmp_path / "config"
    (d / "settings.json" / "inner").mkdir(parents=True)
    workerfs.write(d, "settings.json", "host\n")
    assert (d / "settings.json").read_text() == "host\n"


def test_append_refuses_a_link_a_fifo_and_a_hard_link(tmp_path):
    target, before = _operator_file(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "served.jsonl").symlink_to(target)
    os.mkfifo(state / "fifo.jsonl")
    os.link(target, state / "hard.jsonl")
    assert workerfs.append(state, "served.jsonl", "x\n") is False
    assert workerfs.append(state, "fifo.jsonl", "x\n") is False  # no reader: must not block either
    assert workerfs.append(state, "hard.jsonl", "x\n") is False
    assert target.read_bytes() == before
    assert workerfs.append(state, "new.jsonl", "a\n") and workerfs.append(state, "new.jsonl", "b\n")
    assert (state / "new.jsonl").read_text() == "a\nb\n"


def test_walk_skips_links_and_special_files_with_a_line(tmp_path):
    root = tmp_path / "home"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a")
    os.mkfifo(root / "trap")
    (root / "up").symlink_to(tmp_path)
    (root / "f").symlink_to(tmp_path / "nothing")
    skipped: list[workerfs.Skipped] = []
    files = [f.rel for f in workerfs.walk(root, on_skip=skipped.append)]
    assert files == ["sub/a.txt"]
    lines = sorted(s.line() for s in skipped)
    assert lines == ["f: skipped, a symbolic link (worker-written, not read)",
                     "trap: skipped, a FIFO (worker-written, not read)",
                     "up: skipped, a symbolic link (worker-written, not read)"]


def test_read_remove_and_chmod_never_follow(tmp_path):
    target, before = _operator_file(tmp_path)
    root = tmp_path / "wt"
    root.mkdir()
    (root / "ai").symlink_to(target.parent)
    assert workerfs.read(root, "ai/settings.json").kind == "link"
    assert workerfs.chmod(root, "ai", 0o777) is False
    assert workerfs.remove(root, "ai") is True
    assert target.read_bytes() == before and target.parent.is_dir()
    assert not workerfs.lexists(root, "ai")


def test_chmod_changes_no_file_a_hard_link_shares_with_a_place_outside_the_tree(tmp_path):
    outside = tmp_path / "operators.key"
    outside.write_text("secret")
    outside.chmod(0o400)
    root = tmp_path / "run"
    root.mkdir()
    os.link(outside, root / "linked")
    (root / "own").write_text("x")
    (root / "own").chmod(0o000)
    assert workerfs.chmod(root, "linked", 0o666) is False
    assert outside.stat().st_mode & 0o777 == 0o400
    assert workerfs.chmod(root, "own", 0o600) is True and (root / "own").stat().st_mode & 0o777 == 0o600
    assert workerfs.chmod(root, "", 0o700) is True and root.stat().st_mode & 0o777 == 0o700


def test_a_folder_linked_aside_is_the_hosts_and_names_only_files_the_tree_alone_holds(tmp_path):
    """What a library that opens by path (SQLite) is given: a host folder with second links to the
    worker's files, so a name the worker swaps for a link afterwards changes nothing there; a
    name that is a link, or a file with a hard link elsewhere, gives no folder at all."""
    target, before = _operator_file(tmp_path)
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "s.db").write_bytes(b"the worker's")
    (root / "sub" / "s.db-wal").write_bytes(b"its log")
    with workerfs.linked_aside(root, "sub", ("s.db", "s.db-wal"), ("s.db-shm",)) as aside:
        assert aside is not None and aside.parent == root
        assert sorted(p.name for p in aside.iterdir()) == ["s.db", "s.db-wal"]
        kept = root / "sub" / ".kept"
        os.link(root / "sub" / "s.db", kept)
        (root / "sub" / "swap").symlink_to(target)
        os.rename(root / "sub" / "swap", root / "sub" / "s.db")  # the worker, after the check
        with open(aside / "s.db", "r+b") as fh:
            fh.write(b"THE")
    assert target.read_bytes() == before and kept.read_bytes() == b"THE worker's"
    assert sorted(p.name for p in root.iterdir()) == ["sub"]  # the folder aside is gone
    (root / "sub" / "s.db").unlink()
    os.link(target, root / "sub" / "s.db")  # one of the operator's files, linked in
    (root / "sub" / "l.db").symlink_to(target)
    for names in (("s.db", "s.db-wal"), ("l.db", "s.db-wal"), ("missing.db",)):
        with workerfs.linked_aside(root, "sub", names) as aside:
            assert aside is None, names
    assert target.read_bytes() == before and sorted(p.name for p in root.iterdir()) == ["sub"]


# what the door's open does when a name it lstat'ed as a file or folder is a FIFO by the time it opens
_OPEN_A_FIFO = """import errno, os, stat, sys
from pilothouse.providers import workerfs
root = workerfs.open_root(sys.argv[1])
try:
    fd = os.open("pipe", getattr(workerfs, sys.argv[2]), dir_fd=root)
except OSError as exc:
    print(errno.errorcode[exc.errno])
else:
    print("fifo" if stat.S_ISFIFO(os.fstat(fd).st_mode) else "other")
"""


@pytest.mark.parametrize("flags, outcome", [("FILE_FLAGS", "fifo"), ("DIR_FLAGS", "ENOTDIR")])
def test_the_doors_open_of_a_name_swapped_for_a_fifo_returns_at_once(tmp_path, flags, outcome):
    # no writer ever opens the FIFO: an open that waits for one never returns, and only the
    # child's exit (not a clock) says it did not
    os.mkfifo(tmp_path / "pipe")
    try:
        out = subprocess.run([sys.executable, "-c", _OPEN_A_FIFO, str(tmp_path), flags], capture_output=True,
                             text=True, timeout=guard(None))
    except subprocess.TimeoutExpired:
        pytest.fail(f"opening a FIFO with workerfs.{flags} blocked waiting for a writer")
    assert (out.returncode, out.stdout.strip()) == (0, outcome), out.stderr


_KEY = b"sk-sim-" + b"7f3a9c" * 6
_LIMIT = 64


def _past_limit_offsets() -> list[int]:
    # every start at which the key is partly or wholly past the limit at the end of the head
    # (the limit's byte and the one after), and every start straddling the first chunk boundary
    # past it (the head is limit + 1 bytes, then the search reads chunks of _CHUNK)
    head = list(range(_LIMIT - len(_KEY) + 1, _LIMIT + 2))
    chunk_end = _LIMIT + 1 + workerfs._CHUNK
    return head + list(range(chunk_end - len(_KEY) + 1, chunk_end + 1))


@pytest.mark.parametrize("start", _past_limit_offsets())
@pytest.mark.parametrize("after", [0, 1, 4096])
def test_a_key_anywhere_past_the_read_limit_is_found_even_across_the_limit_or_a_chunk(tmp_path, start, after):
    """read(find=...) on a file longer than its limit: the key straddling the limit, ending on the
    limit's own byte, or straddling a chunk of the search is found, whatever follows it (nothing
    at all included)."""
    body = b"." * start + _KEY + b"." * after
    (tmp_path / "big").write_bytes(body)
    entry = workerfs.read(tmp_path, "big", _LIMIT, find=re.compile(re.escape(_KEY)), span=len(_KEY))
    assert entry.kind == "file" and entry.truncated and entry.data == body[:_LIMIT]
    assert _KEY not in entry.data and entry.found_past, f"key at {start}..{start + len(_KEY)} of {len(body)} bytes"
    clean = b"." * len(body)
    (tmp_path / "big").write_bytes(clean)
    assert not workerfs.read(tmp_path, "big", _LIMIT, find=re.compile(re.escape(_KEY)), span=len(_KEY)).found_past


@pytest.mark.parametrize("planted", ["x.db", "x.db-wal", "x.db-shm"])
def test_a_name_linked_aside_that_is_a_link_to_an_operators_file_gives_no_folder_and_never_its_target(
        tmp_path, planted):
    """A worker's x.db, x.db-wal or x.db-shm that is a symbolic link to an operator's file (its one
    and only name) is refused: the folder aside never holds a second link to that file, so SQLite,
    which writes in place, never gets the operator's file to write into."""
    target, before = _operator_file(tmp_path)
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    for n in ("x.db", "x.db-wal"):
        (root / "sub" / n).write_bytes(b"the worker's " + n.encode())
    (root / "sub" / planted).unlink(missing_ok=True)
    (root / "sub" / planted).symlink_to(target)
    with workerfs.linked_aside(root, "sub", ("x.db", "x.db-wal"), ("x.db-shm",)) as aside:
        assert aside is None
        assert target.stat().st_nlink == 1, "the operator's file was linked aside"
        held = [p for d in root.iterdir() if d.name.startswith(".aside-") for p in d.iterdir()]
        assert not [p for p in held if p.stat(follow_symlinks=False).st_ino == target.stat().st_ino]
    assert target.read_bytes() == before and target.stat().st_nlink == 1
    assert (root / "sub" / planted).is_symlink() and sorted(p.name for p in root.iterdir()) == ["sub"]
