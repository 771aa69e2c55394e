"""The mount plan where a worker meets it (real bwrap): a launch's arguments are never bound, only
its program; the worktree stays writable whatever else names it; the credential is bound once and
read-only; a worktree's main checkout is an empty stand-in; a gate's private dirs are plain paths in
the private /tmp.

These tests FAIL (never skip) when bwrap cannot build a sandbox here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pilothouse.providers import confine, paths
from pilothouse.providers.confine.probe import probe_spec
from pilothouse.providers.errors import UserError
from pilothouse.providers.runners.base import LaunchSpec, Sandbox
from support import git
from test_confine_policy import PATH, require_confinement, run

KINDS = {"--tmpfs": 0, "--bind": 1, "--ro-bind": 2}


def plan(argv: list[str]) -> list[tuple[Path, int]]:
    """(path, kind) of each mount op in a bwrap argv, in order, the base `/` and /tmp left out."""
    args = argv[:argv.index("--")]
    return [(Path(args[i + 1]), KINDS[a]) for i, a in enumerate(args)
            if a in KINDS and args[i + 1] not in ("/", "/tmp")]


def assert_lean(ops: list[tuple[Path, int]]) -> None:
    """Each path mounted once, and no bind repeating the op of the nearest mount around it."""
    paths_ = [p for p, _k in ops]
    assert len(paths_) == len(set(paths_)), ops
    kinds = dict(ops)
    for p, kind in ops:
        above = next((a for a in p.parents if a in kinds), None)
        assert above is None or kinds[above] != kind, (p, above)


@pytest.mark.parametrize("where", ["home", "data dir", "config dir"])
def test_a_hidden_file_named_by_an_argument_stays_hidden(git_repo: Path, isolated_home: Path, where: str) -> None:
    """Only the program's own folders are bound for it: a path among its arguments is not, even when
    the program (`./reader`, found in the worktree) is no path the plan can resolve."""
    require_confinement()
    root = {"home": isolated_home, "data dir": paths.data_dir(), "config dir": paths.config_dir()}[where]
    secret = root / "notes" / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("hidden-text\n")
    reader = git_repo / "reader"
    reader.write_text('#!/bin/sh\nif cat "$1" 2>/dev/null; then echo LEAKED; else echo hidden; fi\n')
    reader.chmod(0o755)
    launch = confine.prepare_command(["./reader", str(secret)], {"PATH": PATH}, git_repo)
    proc = run(launch)
    assert (proc.returncode, proc.stdout) == (0, "hidden\n"), proc.stderr
    assert not [p for p, kind in plan(launch.argv) if kind and secret.is_relative_to(p)]


def test_a_launch_without_a_program_still_gets_the_whole_plan(tmp_path: Path) -> None:
    """A launch whose argv is empty (its caller appends the program) gets bwrap and the plan, ending
    at `--`."""
    require_confinement()
    wd = tmp_path / "wt"
    wd.mkdir()
    wrapped = confine.wrap(LaunchSpec(argv=[], env={"PATH": PATH}, cwd=wd), probe_spec(tmp_path / "sb", wd))
    assert Path(wrapped.argv[0]).name == "bwrap" and wrapped.argv[-3:] == ["--chdir", str(wd), "--"]
    assert (wd, 1) in plan(wrapped.argv)


@pytest.mark.parametrize("also", ["the worker's PATH", "the launch's readonly", "extra_ro", "the gate's PATH"])
def test_the_worktree_stays_writable_when_it_is_also_asked_read_only(tmp_path: Path, also: str) -> None:
    """The same path asked for twice keeps the widest of the asks (rw over ro over hidden): a writer
    whose PATH, readonly list or probe names its own worktree still writes there."""
    require_confinement()
    wd = paths.data_dir() / "worktrees" / "w"  # where pilothouse keeps them: inside a hidden tree
    wd.mkdir(parents=True)
    on_path = also.endswith("PATH")
    env = {"PATH": f"{wd}:{PATH}" if on_path else PATH}
    argv = ["/bin/sh", "-c", "echo x > written && echo wrote"]
    if also == "the gate's PATH":
        launch = confine.prepare_command(argv, env, wd)
    else:
        launch = confine.wrap(LaunchSpec(argv=argv, env=env, cwd=wd, readonly=[wd] if also == "the launch's readonly"
                                         else []), probe_spec(tmp_path / "sb", wd),
                              extra_ro=[wd] if also == "extra_ro" else None)
    proc = run(launch)
    assert (proc.returncode, proc.stdout) == (0, "wrote\n"), proc.stderr
    assert (wd / "written").read_text() == "x\n"
    assert (wd, 1) in plan(launch.argv) and (wd, 2) not in plan(launch.argv)


READ_CREDENTIAL = """
import sys
print(open(sys.argv[1]).read().strip())
try:
    open(sys.argv[1], "a").write("x")
    print("WROTE")
except OSError:
    print("read-only")
"""


@pytest.mark.parametrize("kept", ["a link to the key store", "a file in the sandbox", "also a readonly path"])
def test_the_credential_is_bound_once_read_only(tmp_path: Path, kept: str) -> None:
    require_confinement()
    from pilothouse.providers import keys

    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(paths.providers_dir() / "sim" / "runs" / "r1", wd)
    cred = spec.sandbox.root / "credential"
    if kept == "a file in the sandbox":
        cred.write_text("sk-sim-own-key-0000000000\n")
        cred.chmod(0o600)
    else:
        keys.set_key("sim", "sk-sim-own-key-0000000000", use_backend="file")
        cred.symlink_to(keys.key_file("sim"))
    spec.sandbox.credential = cred
    launch = LaunchSpec(argv=[sys.executable, "-I", "-c", READ_CREDENTIAL, str(cred)],
                        env={"PATH": PATH}, cwd=wd, readonly=[cred] if kept == "also a readonly path" else [])
    wrapped = confine.wrap(launch, spec)
    ops = plan(wrapped.argv)
    assert_lean(ops)
    target = cred.resolve()
    assert [k for p, k in ops if p == target] == ([] if kept == "a file in the sandbox" else [2])
    proc = run(wrapped)
    assert (proc.returncode, proc.stdout) == (0, "sk-sim-own-key-0000000000\nread-only\n"), proc.stderr
    assert target.read_text().strip() == "sk-sim-own-key-0000000000"


@pytest.mark.parametrize("mode", ["code", "explore"])
def test_a_worktrees_main_checkout_shows_only_its_git_dir(git_repo: Path, tmp_path: Path, mode: str) -> None:
    """Without `sandbox.share` the operator's checkout is an empty stand-in around its .git: no
    entry of it, nor a link to the worktree's, appears there."""
    require_confinement()
    wt = paths.data_dir() / "worktrees" / "t1"
    git(git_repo, "worktree", "add", "-q", "-b", "t1", str(wt))
    spec = probe_spec(tmp_path / "sb", wt, mode=mode)
    code = "import os, sys\nprint(sorted(os.listdir(sys.argv[1])))\nprint(sorted(os.listdir('.')))\n"
    wrapped = confine.wrap(LaunchSpec(argv=[sys.executable, "-I", "-c", code, str(git_repo)], env={"PATH": PATH},
                                      cwd=wt), spec)
    proc = run(wrapped)
    assert proc.returncode == 0, proc.stderr
    main_seen, own_seen = proc.stdout.splitlines()
    assert main_seen == "['.git']"
    assert own_seen == str(sorted(p.name for p in wt.iterdir()))


@pytest.mark.parametrize("bad", ["/tmp", "/var/tmp/gate", "/tmp/gate/../etc", "/tmpfoo/gate"])
def test_a_sandbox_made_in_the_private_tmp_must_be_a_plain_path_inside_it(git_repo: Path, tmp_path: Path,
                                                                         bad: str) -> None:
    require_confinement()
    d = Path(bad)
    spec = probe_spec(tmp_path / "sb", git_repo, mode="test")
    spec.sandbox = Sandbox(root=Path("/tmp/gate"), home=d, config=d, data=d, state=d, cache=d, shared_cache=d)
    launch = LaunchSpec(argv=["/bin/true"], env={"PATH": PATH}, cwd=git_repo)
    with pytest.raises(UserError) as err:
        confine.wrap(launch, spec, sandbox_in_tmp=True)
    assert str(err.value) == f"sandbox dir {d} is not a plain path inside the private /tmp"
    # the same dirs made plainly inside it are fine
    spec.sandbox = Sandbox(root=Path("/tmp/gate"), **{k: Path(f"/tmp/gate/{k}") for k in (
        "home", "config", "data", "state", "cache", "shared_cache")})
    proc = run(confine.wrap(launch, spec, sandbox_in_tmp=True))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("given", ["the operator's, which holds the sandbox", "a folder beside the sandbox", "none",
                                   "a folder inside the sandbox"])
def test_a_workers_home_is_its_sandbox_home_unless_it_already_lies_inside_the_sandbox(tmp_path: Path,
                                                                                   given: str) -> None:
    """The usual layout has the sandboxes under the operator's HOME (~/.cache/pilothouse/...): a HOME
    that holds the sandbox is still the operator's, and the worker gets its own."""
    require_confinement()
    operator = tmp_path / "operator"
    wd = tmp_path / "wt"
    wd.mkdir()
    spec = probe_spec(operator / ".cache" / "pilothouse" / "runs" / "r1", wd)
    inside = spec.sandbox.home / "own"
    inside.mkdir()
    home = {"the operator's, which holds the sandbox": operator, "a folder beside the sandbox": tmp_path / "other",
            "none": None, "a folder inside the sandbox": inside}[given]
    env = {"PATH": PATH, **({"HOME": str(home)} if home is not None else {})}
    wrapped = confine.wrap(LaunchSpec(argv=["/bin/sh", "-c", 'printf %s "$HOME"'], env=env, cwd=wd), spec)
    want = str(inside if given == "a folder inside the sandbox" else spec.sandbox.home)
    assert wrapped.env["HOME"] == want
    proc = run(wrapped)
    assert (proc.returncode, proc.stdout) == (0, want), proc.stderr
