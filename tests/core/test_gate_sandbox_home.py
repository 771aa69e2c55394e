"""A confined gate's HOME and XDG dirs live in its sandbox's private /tmp: writable, fresh for every
gate, and never on the host."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pilothouse.core.git.gates import run_command
from pilothouse.providers import confine, paths

ON = {"confinement": "on"}

# the first gate leaves a marker in every dir it was given; the next must find none of them
MARKER = f"marker-{uuid.uuid4().hex}"
WRITE_HOME = (
    'for d in "$HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_STATE_HOME" "$XDG_CACHE_HOME"; do '
    'case "$d" in /tmp/*) ;; *) echo "not private: $d"; exit 7;; esac; '
    f'test -e "$d/{MARKER}" && {{ echo "left over: $d"; exit 8; }}; '
    f'echo secret > "$d/{MARKER}" && test -s "$d/{MARKER}" || exit 9; done; '
    'test -z "$TMPDIR" || { echo "TMPDIR=$TMPDIR"; exit 10; }; '
    'ls -ld "$HOME"; echo ok'
)


def test_gate_home_is_writable_private_and_fresh(git_repo: Path, isolated_home: Path) -> None:
    first = run_command(WRITE_HOME, git_repo, level="fast", settings=ON)
    assert first.passed, first
    assert "drwx------" in first.output_tail  # only the gate's own user may enter it
    second = run_command(WRITE_HOME, git_repo, level="fast", settings=ON)
    assert second.passed, second  # nothing the first gate wrote to its HOME survived it
    # nothing on the host: no HOME in /tmp, no scratch dir in pilothouse's cache, the real HOME untouched
    assert not list(confine.GATE_SANDBOX.rglob(MARKER)) and not list(Path("/tmp").glob(f"*/*/{MARKER}"))
    assert not (paths.cache_dir() / "gates").exists()
    assert not list(isolated_home.rglob(MARKER))


def test_gate_home_cannot_be_planted_from_the_host(git_repo: Path, tmp_path: Path) -> None:
    """A directory at the gate HOME's path on the host (anyone can create one in /tmp) is not what
    the gate gets: its HOME is made inside the sandbox, never bound from the host."""
    # arranged whether or not the path already exists here (then the attack's precondition holds
    # already): only what this test made is removed afterwards
    planted = confine.GATE_SANDBOX / "home"
    made = [d for d in (confine.GATE_SANDBOX, planted) if not d.exists()]
    planted.mkdir(parents=True, exist_ok=True)
    marker, new = planted / f"marker-{uuid.uuid4().hex}", planted / f"new-{uuid.uuid4().hex}"
    try:
        marker.write_text("planted")
        res = run_command(f'test ! -e "$HOME/{marker.name}" && echo fresh > "$HOME/{new.name}"', git_repo,
                          settings=ON)
        assert res.passed, res
        assert not new.exists()
        assert marker.read_text() == "planted"
    finally:
        marker.unlink(missing_ok=True)
        for d in reversed(made):
            d.rmdir()


def test_go_caches_in_the_operators_home_move_with_the_gate_home(git_repo: Path, isolated_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """GOCACHE and GOPATH set to the operator's home would name its hidden, read-only stand-in
    (`go test`: "mkdir …/.cache: read-only file system"): the gate gets writable ones of its own. A
    module cache outside the home (shared with `sandbox.read`) is the operator's choice and stays."""
    monkeypatch.setenv("GOCACHE", str(isolated_home / ".cache" / "go-build"))
    monkeypatch.setenv("GOPATH", str(isolated_home / "go"))
    monkeypatch.setenv("GOMODCACHE", "/opt/shared-gomod")
    res = run_command('for d in "$GOCACHE" "$GOPATH"; do case "$d" in "$HOME"/*|"$XDG_CACHE_HOME"/*) ;; '
                      '*) echo "not the gate\'s: $d"; exit 7;; esac; mkdir -p "$d" && touch "$d/x" || exit 9; done; '
                      'test "$GOMODCACHE" = /opt/shared-gomod || { echo "GOMODCACHE=$GOMODCACHE"; exit 8; }',
                      git_repo, level="fast", settings=ON)
    assert res.passed, res
    assert not (isolated_home / "go").exists() and not (isolated_home / ".cache" / "go-build").exists()


def test_unconfined_gate_keeps_the_host_home(git_repo: Path, isolated_home: Path) -> None:
    res = run_command(f'test "$HOME" = "{isolated_home}"', git_repo, settings={"confinement": "off"})
    assert res.passed, res
    off = confine.prepare_command(["true"], {"HOME": str(isolated_home)}, git_repo,
                                  settings={"confinement": "off"})
    assert off.argv == ["true"] and off.env == {"HOME": str(isolated_home)}


def test_setup_commands_get_a_home_on_disk_removed_afterwards(git_repo: Path) -> None:
    """`npm ci` or `pip install` fill HOME with package caches: the sandbox's /tmp is memory, so a
    setup command's HOME is a throwaway dir on disk (in pilothouse's cache), gone after it ran."""
    res = run_command('echo cache > "$HOME/pkg" && echo "$HOME"', git_repo, level="setup[0]", check_tree=False,
                      settings=ON)
    assert res.passed, res
    gates = paths.cache_dir() / "gates"
    assert Path(res.output_tail.strip()).is_relative_to(gates)
    assert gates.is_dir() and not any(gates.iterdir())
