"""The mount plan stays lean (no bind repeating the one around it) without losing a read-only bind
inside a writable one, and its cached path work follows PATH, HOME and time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine import mounts as confine_mounts
from pilothouse.providers.confine.mounts import _drop_nested
from pilothouse.providers.confine.probe import probe_spec
from pilothouse.providers.runners.base import LaunchSpec
from support import git, guard

KINDS = {"--tmpfs": 0, "--bind": 1, "--ro-bind": 2}


def plan(argv: list[str]) -> dict[Path, int]:
    """(path -> kind) of the mount ops in a bwrap argv, the base `--ro-bind / /` and /tmp left out."""
    ops: dict[Path, int] = {}
    args = argv[:argv.index("--")]
    for i, a in enumerate(args):
        if a in KINDS and args[i + 1] not in ("/", "/tmp"):
            ops[Path(args[i + 1])] = KINDS[a]
    return ops


def binds_of(ops: dict[Path, int], path: Path) -> list[Path]:
    return [p for p in ops if p == path or p.is_relative_to(path)]


@pytest.fixture
def tool_root(isolated_home: Path) -> Path:
    """A version manager under $HOME with several PATH entries inside it (like ~/.pyenv)."""
    root = isolated_home / ".faketool"
    for sub in ("shims", "bin", "versions/1.0/bin", "libexec"):
        (root / sub).mkdir(parents=True)
    return root


def gate_argv(workdir: Path, path_env: str) -> list[str]:
    return confine.prepare_command(["/bin/sh", "-c", "true"], {"PATH": path_env}, workdir).argv


def test_tool_root_is_bound_once_and_git_stays_read_only_in_the_worktree(git_repo: Path, tool_root: Path) -> None:
    entries = [tool_root / "shims", tool_root / "bin", tool_root / "versions/1.0/bin"]
    path_env = os.pathsep.join([*map(str, entries), "/usr/bin", "/bin"])
    argv = gate_argv(git_repo, path_env)
    ops = plan(argv)
    assert binds_of(ops, tool_root) == [tool_root] and ops[tool_root] == 2
    # the read-only .git inside the writable worktree is not a redundant bind: it must stay
    assert ops[git_repo] == 1 and ops[git_repo / ".git"] == 2
    # and no bind anywhere repeats the op around it
    for p, kind in ops.items():
        above = next((a for a in p.parents if a in ops), None)
        assert above is None or ops[above] != kind, (p, above)
    # what the shims need is still there, read-only
    script = f"test -d {tool_root}/libexec && ! touch {tool_root}/libexec/x 2>/dev/null && touch ok"
    launch = confine.prepare_command(["/bin/sh", "-c", script], {"PATH": path_env}, git_repo)
    proc = subprocess.run(launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, text=True, timeout=guard(60))
    assert proc.returncode == 0, proc.stderr
    assert (git_repo / "ok").exists() and not (tool_root / "libexec" / "x").exists()


def test_drop_nested_keeps_what_changes_the_view() -> None:
    a, b, c, h = Path("/opt/a"), Path("/opt/a/b"), Path("/opt/a/b/c"), Path("/srv/hidden")
    assert _drop_nested({a: 2, b: 2, c: 2}) == {a: 2}  # ro in ro in ro
    assert _drop_nested({a: 1, b: 1}) == {a: 1}  # rw in rw
    assert _drop_nested({a: 1, b: 2, c: 1}) == {a: 1, b: 2, c: 1}  # ro in rw, rw in ro
    assert _drop_nested({a: 2, b: 1, c: 2}) == {a: 2, b: 1, c: 2}  # a rw between two ro
    # a bind under a hidden tmpfs stays; a hide inside a hide adds nothing (the outer tmpfs is empty)
    assert _drop_nested({h: 0, h / "x": 2, h / "y": 0}) == {h: 0, h / "x": 2}
    assert _drop_nested({h: 0, h / "x": 2, h / "x" / "z": 0}) == {h: 0, h / "x": 2, h / "x" / "z": 0}
    assert _drop_nested({a: 2, c: 2, b / "d": 1}) == {a: 2, b / "d": 1}  # nearest op, not the parent dir


def test_worktree_git_dirs_are_bound_read_only(git_repo: Path) -> None:
    """A linked worktree's gitdir (outside it) and .git file (inside it) stay read-only binds."""
    wt = paths.data_dir() / "worktrees" / "t1"
    git(git_repo, "worktree", "add", "-q", "-b", "t1", str(wt))
    ops = plan(gate_argv(wt, "/usr/bin:/bin"))
    assert ops[wt] == 1 and ops[wt / ".git"] == 2
    assert ops[git_repo / ".git"] == 2  # the common dir: no bind of it, or of a dir inside it, dropped
    assert ops[paths.data_dir()] == 0


def test_path_cache_follows_path_and_expires(git_repo: Path, isolated_home: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("tool-a", "tool-b", "tool-c"):
        (isolated_home / f".{name}" / "bin").mkdir(parents=True)
    current = isolated_home / ".current"
    current.symlink_to(isolated_home / ".tool-a")
    path_env = f"{current}/bin:/usr/bin:/bin"
    clock = [1000.0]
    monkeypatch.setattr(confine_mounts, "_clock", lambda: clock[0])
    confine_mounts.clear_plan_cache()
    assert isolated_home / ".tool-a" in plan(gate_argv(git_repo, path_env))
    # re-pointed under the same PATH: the resolved plan is reused while it is fresh…
    current.unlink()
    current.symlink_to(isolated_home / ".tool-b")
    ops = plan(gate_argv(git_repo, path_env))
    assert isolated_home / ".tool-a" in ops and isolated_home / ".tool-b" not in ops
    # …a different PATH is resolved at once…
    ops = plan(gate_argv(git_repo, f"{isolated_home}/.tool-c/bin:{path_env}"))
    assert isolated_home / ".tool-c" in ops and isolated_home / ".tool-b" in ops
    # …and the old one is resolved again once it has expired
    clock[0] += confine_mounts.PLAN_TTL_S + 1
    ops = plan(gate_argv(git_repo, path_env))
    assert isolated_home / ".tool-b" in ops and isolated_home / ".tool-a" not in ops


def test_hidden_roots_follow_new_dirs_and_a_new_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree created after the plan was cached (pilothouse's data dir, say) is hidden from the next
    run on: the cache never leaves something visible that must not be."""
    monkeypatch.setenv("PILOTHOUSE_HOME", str(tmp_path / "ph"))
    confine_mounts.clear_plan_cache()
    before = confine_mounts.hidden_roots()
    assert paths.data_dir() not in before
    paths.data_dir().mkdir(parents=True)
    assert paths.data_dir() in confine_mounts.hidden_roots()
    other_home = tmp_path / "other-home"
    other_home.mkdir()
    monkeypatch.setenv("HOME", str(other_home))
    assert other_home in confine_mounts.hidden_roots()


def test_paths_inside_a_writable_tree_are_resolved_every_time(git_repo: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH entry inside the worktree may be re-pointed by its worker: never taken from the cache."""
    venv_bin = git_repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    confine.prepare_command(["true"], {"PATH": "/usr/bin:/bin"}, git_repo)  # probes bwrap (its own plans)
    calls: list[str] = []
    real_runtime_paths = confine_mounts._runtime_paths
    monkeypatch.setattr(confine_mounts, "_runtime_paths",
                        lambda launch: calls.append("x") or real_runtime_paths(launch))
    confine_mounts.clear_plan_cache()
    for _ in range(2):
        confine.prepare_command(["/bin/sh", "-c", "true"], {"PATH": f"{venv_bin}:/usr/bin:/bin"}, git_repo)
    # git_repo is under /tmp here, so its .venv/bin is a runtime path to bind: resolved both times
    assert len(calls) == (2 if git_repo.resolve().is_relative_to("/tmp") else 1)


def test_the_pilothouse_package_is_bound_into_every_sandbox_wherever_it_is_installed() -> None:
    """netrelay and the builtin worker run on this package inside the sandbox, whose /tmp is private:
    a checkout cloned under /tmp must still be bound in (its root, not a subpackage). Asked the way a
    dispatch runs (python -I, a neutral cwd), where no test runner put the checkout on sys.path."""
    import sys

    code = ("import pathlib, pilothouse\n"
            "from pilothouse.providers.confine import mounts\n"
            "root = pathlib.Path(pilothouse.__file__).resolve().parent\n"
            "print((root / '__init__.py').is_file(), root in mounts._interpreter_paths())\n")
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr


# read-only paths asked by a runner (LaunchSpec.readonly: its install root, its key file) or a caller
# (extra_ro) that are, or hold, a tree the sandbox hides
ABOVE_HIDDEN = {
    "home": lambda home, main: home,
    "a link to home": lambda home, main: _link(main.parent / "home-link", home),
    "the folder above home": lambda home, main: home.parent,
    "pilothouse's own folder": lambda home, main: paths.data_dir().parent,
    "pilothouse's data": lambda home, main: paths.data_dir(),
    "the main checkout": lambda home, main: main,
    "the folder above the main checkout": lambda home, main: main.parent,
}


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("via", ["readonly", "extra_ro"])
@pytest.mark.parametrize("asked", sorted(ABOVE_HIDDEN))
def test_a_read_only_path_that_holds_a_hidden_tree_never_shows_it(git_repo: Path, isolated_home: Path,
                                                                  asked: str, via: str) -> None:
    """No read-only bind lands on or above $HOME, pilothouse's dirs or the main checkout: those stay an
    empty tmpfs, whatever a runner or caller asks to see read-only."""
    own = paths.data_dir() / "worktrees" / "repo-test" / "job" / "own"
    git(git_repo, "worktree", "add", "-q", "-b", "own", str(own))
    canaries = [isolated_home / "canary", git_repo / ".env", paths.config_dir() / "canary"]
    for c in canaries:
        c.parent.mkdir(parents=True, exist_ok=True)
        c.write_text("hidden\n")
    spec = probe_spec(paths.providers_dir() / "sim" / "runs" / "r1", own)
    ro = ABOVE_HIDDEN[asked](isolated_home, git_repo)
    code = "import os, sys\nprint([p for p in sys.argv[1:] if os.path.exists(p)])\n"
    launch = LaunchSpec(argv=[sys.executable, "-I", "-c", code, *map(str, canaries)],
                        env={"PATH": "/usr/bin:/bin", "HOME": str(spec.sandbox.home)}, cwd=own,
                        readonly=[ro] if via == "readonly" else [])
    wrapped = confine.wrap(launch, spec, extra_ro=[ro] if via == "extra_ro" else None)
    ops = plan(wrapped.argv)
    shut = [*confine_mounts.hidden_roots(spec), git_repo.resolve()]
    for h in shut:
        assert not [p for p, kind in ops.items() if kind and h.is_relative_to(p)], (h, ops)
    assert ops[isolated_home.resolve()] == 0 and ops[git_repo.resolve()] == 0
    proc = subprocess.run(wrapped.argv, env=wrapped.env, cwd=wrapped.cwd, capture_output=True, text=True,
                          timeout=guard(60), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
