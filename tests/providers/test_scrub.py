"""No raw key at rest: a run folder is redacted when its run ends, whatever the worker did with its key."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.mark.parametrize("provider", ["..", ".", "", "../..", "sim/../..", "../elsewhere"])
def test_a_provider_name_that_leaves_the_providers_folder_scrubs_nothing(tmp_path: Path, provider: str) -> None:
    """The run's provider names the folder as much as its id does: `..` would make the runs folder
    of the data dir (or further up) the one walked and rewritten."""
    from pilothouse.providers.sandbox import runs_dir
    from pilothouse.providers.scrub import scrub_run

    where = Path(os.path.normpath(runs_dir(provider))) / "run-1"
    assert not where.is_relative_to(paths.providers_dir()) or provider in (".", ""), where
    (where / "home").mkdir(parents=True, exist_ok=True)
    (where / "home" / "notes.txt").write_text(KEY)
    assert scrub_run(provider, "run-1", Redactor([KEY])) == []
    assert (where / "home" / "notes.txt").read_text() == KEY


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


def test_no_key_to_look_for_or_a_root_that_is_a_link_leaves_the_files_as_they_are(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text(KEY)
    (tmp_path / "link").symlink_to(run)  # a run folder is the host's own directory, never a link to one
    assert scrub_tree(run, Redactor([])) == []
    assert scrub_tree(tmp_path / "link", Redactor([KEY])) == []
    assert scrub_tree(tmp_path / "missing", Redactor([KEY])) == []
    assert (run / "notes.txt").read_text() == KEY

def test_a_key_that_contains_another_key_is_redacted_whole(tmp_path: Path) -> None:
    # the longer key is tried first: the shorter one inside it must not leave the longer one's tail
    longer = KEY + "-and-more-of-it"
    run = tmp_path / "run"
    run.mkdir()
    (run / "text.json").write_text(json.dumps({"out": longer}))
    (run / "binary").write_bytes(b"\0" + longer.encode() + b"\0")
    assert sorted(scrub_tree(run, Redactor([KEY, longer]))) == ["binary", "text.json"]
    assert json.loads((run / "text.json").read_text()) == {"out": REDACTED}
    assert (run / "binary").read_bytes() == b"\0" + b"*" * len(longer) + b"\0"

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


def test_a_file_of_exactly_256_mib_is_rewritten_and_one_byte_more_is_removed(tmp_path: Path) -> None:
    """The limit is 256 MiB whatever the module's constant says: a file at it is read whole and
    rewritten with its key masked, one a byte past it is too big to rewrite and goes."""
    limit = 256 << 20
    run = tmp_path / "run"
    run.mkdir()
    key = KEY.encode()
    for name, size in (("at-limit.bin", limit), ("over-limit.bin", limit + 1)):
        with open(run / name, "wb") as fh:  # sparse: NULs up to the key, its last bytes
            fh.seek(size - len(key) - 1)
            fh.write(key + b"\n")
    assert sorted(scrub_tree(run, Redactor([KEY]))) == ["at-limit.bin", "over-limit.bin"]
    assert sorted(p.name for p in run.iterdir()) == ["at-limit.bin"]
    assert (run / "at-limit.bin").stat().st_size == limit  # a binary file keeps its length
    with open(run / "at-limit.bin", "rb") as fh:
        fh.seek(limit - len(key) - 2)
        assert fh.read() == b"\0" + b"*" * len(key) + b"\n"


# scrub_tree in a child process that, root or not, may not write into a folder its mode closes
# (no CAP_DAC_OVERRIDE, nor CAP_DAC_READ_SEARCH to read a file its mode closes): a worker's
# read-only folder or file then stops it as it stops the host's user; FSIZE: a write past it fails
# with EFBIG, as on a full disk
_SCRUB_IN_CHILD = """
import json, resource, signal, sys
from pathlib import Path
from pilothouse.providers.redact import Redactor
from pilothouse.providers.scrub import scrub_tree
root, key, fsize = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if fsize:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
print(json.dumps(sorted(scrub_tree(root, Redactor([key])))))
"""

_NO_DAC = ["--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search"]


def _scrub_in_child(root: Path, *, fsize: int = 0) -> list[str]:
    argv = [sys.executable, "-c", _SCRUB_IN_CHILD, str(root), KEY, str(fsize)]
    if os.geteuid() == 0:  # root passes any mode: the child drops what lets it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, and no setpriv (util-linux) to run the scrub without CAP_DAC_OVERRIDE")
        argv = [setpriv, *_NO_DAC, *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=guard(60))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_file_in_a_folder_the_worker_made_read_only_is_rewritten_once_the_folder_is_its_owners_again(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    inner = run / "state" / "session"
    inner.mkdir(parents=True)
    above = (run / "state").stat().st_mode
    (inner / "log.json").write_text(json.dumps({"out": KEY}))
    inner.chmod(0o500)  # the worker closed its own folder: no new file (the redacted copy) in it
    assert _scrub_in_child(run) == ["state/session/log.json"]
    assert json.loads((inner / "log.json").read_text()) == {"out": REDACTED}
    assert inner.stat().st_mode & 0o777 == 0o700  # opened to its owner only, the folder above left as it was
    assert (run / "state").stat().st_mode == above
    assert sorted(p.name for p in inner.iterdir()) == ["log.json"]  # no temp left of the failed write


def test_a_file_that_cannot_be_rewritten_is_removed(tmp_path: Path) -> None:
    # a write of more than 4 KiB fails (EFBIG, as when the disk is full), once and on the retry
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "big.log").write_text(f"{KEY}\n" + "x" * 8192)
    (run / "small.json").write_text(json.dumps({"out": KEY}))
    assert _scrub_in_child(run, fsize=4096) == ["logs/big.log", "small.json"]
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == ["logs", "small.json"]
    assert json.loads((run / "small.json").read_text()) == {"out": REDACTED}


def test_what_a_worker_locked_against_its_owner_is_opened_again_and_every_key_goes(tmp_path: Path) -> None:
    """The run folder and everything in it are the operator's (a worker runs as its uid): a run
    folder the worker made read-only, a file it made mode 000, a file too big to rewrite in such a
    folder, a folder it made mode 000 are each taken back (the folder opened to its owner, the file
    made readable) and scrubbed; nothing holding a key is passed over."""
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "a-unreadable.json").write_text(json.dumps({"out": KEY}))
    (run / "a-unreadable.json").chmod(0o000)
    (run / "b-top.json").write_text(json.dumps({"out": KEY}))
    with open(run / "c-big.bin", "wb") as fh:  # too big to rewrite: removed, from a read-only folder
        fh.write(KEY.encode())
        fh.truncate((256 << 20) + 1)
    (run / "sub" / "z.json").write_text(json.dumps({"out": KEY}))
    (run / "sub" / "closed.db").write_bytes(b"")  # a database SQLite may not open: its WAL is masked
    (run / "sub" / "closed.db").chmod(0o000)
    (run / "sub" / "closed.db-wal").write_bytes(b"\0" + KEY.encode())
    (run / "hidden").mkdir()
    (run / "hidden" / "k.txt").write_text(KEY)
    (run / "hidden").chmod(0o000)  # not even listed, but by its owner
    (run / "sub").chmod(0o500)
    run.chmod(0o500)
    try:
        assert _scrub_in_child(run) == ["a-unreadable.json", "b-top.json", "c-big.bin", "hidden/k.txt",
                                        "sub/closed.db-wal", "sub/z.json"]
    finally:
        run.chmod(0o700)
    assert all((run / d).stat().st_mode & 0o777 == 0o700 for d in ("", "sub", "hidden"))
    assert (run / "hidden" / "k.txt").read_text() == REDACTED
    for name in ("a-unreadable.json", "b-top.json", "sub/z.json"):
        assert json.loads((run / name).read_text()) == {"out": REDACTED}, name
    assert (run / "sub" / "closed.db-wal").read_bytes() == b"\0" + b"*" * len(KEY)
    assert sorted(p.name for p in run.iterdir()) == ["a-unreadable.json", "b-top.json", "hidden", "sub"]
    assert not _files_holding(run, [KEY.encode()])



# a key whose forms run from 31 to 41 bytes (JSON escapes, \u00e9, URL escapes, base64 at each
# offset), beside a short one of 6 bytes: the search past the limit must carry over as much as the
# longest form of any key, whichever key is the shortest
_LONG = 'sk-canary/scrub"7a6b5c4d3e2f\\é'
_SHORT = "q7w8e9"


@pytest.mark.parametrize("form", sorted(Redactor([_LONG]).forms, key=lambda f: (len(f.encode()), f)))
def test_every_form_of_a_key_across_the_limit_or_a_chunk_boundary_of_a_big_file_is_found(
        tmp_path: Path, form: str) -> None:
    """Each form the redactor knows, placed in a sparse file too big to rewrite so that only its
    last byte is past a boundary of the search: the limit's own byte (the file's last), the end of
    the first read, the end of the first chunk searched after it. Every such file holds a key
    and goes."""
    from pilothouse.providers.scrub import MAX_FILE_BYTES

    raw = form.encode("utf-8")
    chunk = 1 << 20
    ends = {"ends-on-the-limits-byte": MAX_FILE_BYTES + 1, "across-the-first-read": MAX_FILE_BYTES + 2,
            "across-a-chunk": MAX_FILE_BYTES + 1 + chunk + 1}
    run = tmp_path / "run"
    run.mkdir()
    for name, end in ends.items():
        with open(run / name, "wb") as fh:  # NULs up to the form, nothing or a newline after it
            fh.seek(end - len(raw))
            fh.write(raw if name == "ends-on-the-limits-byte" else raw + b"\n")
    assert sorted(scrub_tree(run, Redactor([_LONG, _SHORT]))) == sorted(ends), form
    assert list(run.iterdir()) == []
