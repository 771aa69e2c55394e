"""`pilothouse probe`: the functional check, its record, re-probing when bwrap changes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine import probe
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec
from support import git


def require_confinement() -> None:
    ok, reason = confine.available()
    assert ok, f"confinement is not available on this machine: {reason}"


def test_probe_cli_passes_and_records(cli):
    require_confinement()
    res = cli("probe", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    record = json.loads(res.stdout)
    assert record["ok"] is True
    # the probe's own planted link is its evidence: `init` on a fresh home shows the operator no alarm
    assert "served.jsonl" not in res.stderr, res.stderr
    checks = {r["check"]: r for r in record["results"]}
    assert checks["own worktree"]["child"] == "ok" and checks["own worktree"]["reached_host"]
    for name in ("other worktree", "main checkout", "$HOME", "/tmp outside its own", "explore mode: own worktree"):
        assert checks[name]["pass"] and not checks[name]["reached_host"], name
    assert checks["$HOME"]["child"] in {"EROFS", "EACCES", "ENOENT"}
    reads = [name for name in checks if name.startswith("read: ")]
    assert len(reads) == 7 and all(checks[n]["pass"] and checks[n]["child"] != "read" for n in reads), reads
    for route in ("main checkout's untracked .env", "a link in the worktree to a key", "a '..' route out of the worktree",
                  "/proc/self/root", "another provider's key"):
        assert f"read: {route}" in checks
    assert checks["a module planted in the worktree is not imported by pilothouse"]["pass"]
    host = [name for name in checks if name.startswith("host steps: ")]
    assert len(host) == 5 and all(checks[n]["pass"] for n in host), host
    assert checks["a pilothouse/ package planted in the worktree is not run by pilothouse or its MCP registration"]["pass"]
    on_disk = json.loads(probe.record_path().read_text())
    assert on_disk["bwrap"]["sha256"] == probe.file_sha256(confine.bwrap_path() or "")
    assert on_disk["bwrap"]["version"]
    # nothing left behind in the user's places
    assert not any(p.name.startswith("pilothouse-probe-") for p in Path.home().iterdir())


def test_probe_runs_the_corpus_file_attacks_against_the_hosts_own_steps(tmp_path, capfd):
    """The fast half of tests/core/test_hostile_builders.py: links and a FIFO planted from inside a
    real sandbox, then the real runner set-up, served-log append, scrub and scan: each decoy is
    byte-identical and nothing blocked."""
    from pilothouse.providers.confine import probe_files

    require_confinement()
    wt = tmp_path / "wt"
    wt.mkdir()
    spec = probe.probe_spec(tmp_path / "files", wt)
    results = probe_files.file_checks(spec, tmp_path / "files", {"PATH": os.environ["PATH"],
                                                                  "HOME": str(spec.sandbox.home)})
    assert [r["check"] for r in results] == [
        "host steps: claude-code config folder -> operator's", "host steps: codex config folder -> operator's",
        "host steps: opencode plugin -> operator's file", "host steps: served.jsonl -> operator's file",
        "host steps: a FIFO in the run HOME"]
    assert all(r["child"] == "planted" and r["pass"] and not r["reached_host"] for r in results), results
    assert "served.jsonl" not in capfd.readouterr().err  # the sim's refusal went to the check, not the operator
    assert (spec.sandbox.config / "claude").is_dir() and not (spec.sandbox.config / "claude").is_symlink()
    assert (spec.sandbox.home / "trap").is_fifo()


def test_probe_human_output(cli):
    require_confinement()
    res = cli("probe")
    assert res.returncode == 0, res.stderr
    assert "confinement works: bwrap" in res.stdout and "other worktree" in res.stdout


def test_probe_runner_binary(cli):
    require_confinement()
    res = cli("probe", "--runner", "builtin", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    record = json.loads(res.stdout)
    assert any(r["check"] == "runner builtin starts confined" and r["pass"] for r in record["results"])
    assert record["binaries"]


def test_changed_bwrap_binary_reprobes(tmp_path, monkeypatch):
    require_confinement()
    first = probe.ensure_probed()
    assert first["ok"]
    again = probe.ensure_probed()
    assert again["time"] == first["time"]  # same binary: the record is trusted, no new probe
    assert probe.record_path().read_text() == json.dumps(first, indent=2) + "\n"
    # a different bwrap binary (same program, different bytes) must be probed before it is trusted
    copy = tmp_path / "bwrap"
    shutil.copy2(confine.bwrap_path() or "", copy)
    with open(copy, "ab") as fh:
        fh.write(b"\0changed")
    os.chmod(copy, 0o755)
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(copy))
    assert not probe.record_matches_bwrap(first)
    third = probe.ensure_probed()
    assert third["ok"] and third["bwrap"]["sha256"] == probe.file_sha256(copy)
    assert third["bwrap"]["sha256"] != first["bwrap"]["sha256"]


def test_changed_runner_binary_reprobes(tmp_path):
    require_confinement()
    exe = tmp_path / "fake-cli"
    exe.write_text("#!/bin/sh\necho fake-cli 1.0\n")
    exe.chmod(0o755)
    record = probe.ensure_probed(str(exe))
    assert str(exe) not in record["binaries"]  # never probed with --runner: bwrap's probe covers it
    record["binaries"][str(exe)] = probe.binary_check(str(exe), tmp_path / "b1")
    assert record["binaries"][str(exe)]["pass"], record["binaries"][str(exe)]
    probe.atomic_write_json(probe.record_path(), record)
    exe.write_text("#!/bin/sh\necho fake-cli 2.0 changed\n")
    after = probe.ensure_probed(str(exe))
    entry = after["binaries"][str(exe)]
    assert entry["sha256"] == probe.file_sha256(exe) and "2.0" in entry["output"]


def test_unavailable_bwrap_says_so_once_with_the_fix(cli, tmp_path):
    res = cli("probe", env={"PILOTHOUSE_BWRAP": str(tmp_path / "missing")})
    assert res.returncode == 1
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "bubblewrap" in lines[0] and "apt-get install bubblewrap" in lines[0]
    assert "Traceback" not in res.stderr


def test_broken_namespaces_named_with_sysctl(tmp_path, monkeypatch):
    # a bwrap that cannot create namespaces (simulated by a stand-in that fails like bwrap does)
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\ncase \"$1\" in --version) echo 'bubblewrap 0.8.0';; --help) echo usage;;"
                    " *) echo 'bwrap: No permissions to creating new namespace' >&2; exit 1;; esac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(fake))
    ok, reason = confine.available()
    assert not ok
    assert "No permissions to creating new namespace" in reason and "sysctl" in reason


def test_the_read_checks_fail_when_a_sandbox_shows_the_main_checkout(tmp_path):
    """The probe is not vacuous: widen the sandbox to the main checkout and its read check says so."""
    require_confinement()
    from pilothouse.providers import paths
    from pilothouse.providers.confine import probe_reads

    visible = probe._visible_dir()
    assert visible is not None, "no directory outside the hidden trees to put a checkout in"
    base = paths.cache_dir() / "probe-test"
    base.mkdir(parents=True)
    try:
        main, _own, _other = probe._throwaway_repo(base, visible)
        # a run in the main checkout itself (explore there) sees its untracked files: so must the probe
        spec = probe.probe_spec(base, main, mode="explore")
        results = {r["check"]: r for r in probe_reads.read_checks(spec, main, main, "t", probe._child_env(spec))}
        leak = results["read: main checkout's untracked .env"]
        assert (leak["pass"], leak["child"], leak["reached_host"]) == (False, "read", True)
        assert results["read: $HOME"]["pass"] and results["read: another provider's key"]["pass"]
        assert not (main / ".env").exists() and not list(main.glob("t-*"))  # the canaries are cleaned up
    finally:
        shutil.rmtree(visible, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_probe_after_the_cache_folder_was_cleaned_away_makes_it_again(tmp_path, monkeypatch):
    """~/.cache removed between probes (a cleaner, the operator): the probe record still vouches for
    bwrap, so nothing else recreates the folder the probe works in."""
    import shutil

    from pilothouse.providers import paths

    monkeypatch.delenv("PILOTHOUSE_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "gone" / "cache"))
    require_confinement()
    assert probe.run_probe()["ok"]
    shutil.rmtree(tmp_path / "gone")
    assert probe.run_probe()["ok"] and paths.cache_dir().is_dir()


def test_a_runner_binary_that_no_longer_starts_confined_refuses_writers(tmp_path):
    import pytest
    from pilothouse.providers.errors import UserError

    require_confinement()
    exe = tmp_path / "fake-cli"
    exe.write_text("#!/bin/sh\necho fake-cli 1.0\n")
    exe.chmod(0o755)
    record = probe.ensure_probed(str(exe))
    record["binaries"][str(exe)] = probe.binary_check(str(exe), tmp_path / "b1")
    probe.atomic_write_json(probe.record_path(), record)
    exe.write_text("#!/bin/sh\necho 'fake-cli: cannot start here' >&2\nexit 3\n")
    with pytest.raises(UserError) as err:
        probe.ensure_probed(str(exe))
    assert str(err.value) == (f"refusing to launch a writer: {exe} does not start confined: fake-cli: cannot start "
                              "here; see `pilothouse probe`")
    saved = json.loads(probe.record_path().read_text())
    assert saved["ok"] is False and saved["binaries"][str(exe)]["exit_code"] == 3


def _bwrap_that_confines_nothing(where: Path) -> Path:
    """A bwrap that starts what it is given, unconfined: bwrap's own smoke test (`exit 0` in it) passes."""
    fake = where / "bwrap"
    fake.write_text('#!/bin/sh\ncase "$1" in --version) echo "bubblewrap 0.0.1"; exit 0;; '
                    '--help) echo usage; exit 0;; esac\n'
                    'while [ "$#" -gt 0 ]; do if [ "$1" = "--" ]; then shift; exec "$@"; fi; shift; done\nexit 1\n')
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("writer", ["code", "resume", "test", "gate"])
def test_a_writer_is_refused_when_the_probe_finds_that_bwrap_does_not_confine(git_repo, tmp_path, monkeypatch,
                                                                              writer):
    """bwrap starts, so it is 'available'; only the probe's own writes and reads show that nothing is
    confined: prepare() runs it before any writer (a gate is a test-mode writer) and names what failed."""
    monkeypatch.setenv("PILOTHOUSE_BWRAP", str(_bwrap_that_confines_nothing(tmp_path)))
    assert confine.available() == (True, "")
    own = paths.data_dir() / "worktrees" / "repo-test" / "job" / "own"
    git(git_repo, "worktree", "add", "-q", "-b", "own", str(own))
    argv = [sys.executable, "-I", "-c", "open('landed', 'w')"]
    with pytest.raises(UserError) as err:
        if writer == "gate":
            confine.prepare_command(argv, {"PATH": "/usr/bin:/bin"}, own)
        else:
            spec = probe.probe_spec(paths.providers_dir() / "sim" / "runs" / f"r-{writer}", own, mode=writer)
            confine.prepare(LaunchSpec(argv=argv, env={"PATH": "/usr/bin:/bin"}, cwd=own), spec)
    message = str(err.value)
    assert message.startswith("refusing to launch a writer: confinement failed: "), message
    assert message.endswith("; see `pilothouse probe`"), message
    for check in ("other worktree", "main checkout", "$HOME", "/tmp outside its own"):
        assert check in message
    assert not (own / "landed").exists()  # refused before it ran
    record = probe.load_record()
    assert record is not None and record["ok"] is False
