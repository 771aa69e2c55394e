"""The standing adversarial corpus: one scripted hostile builder per attack class, dispatched for
real (bubblewrap, the dispatch process, the sim; the agent CLIs where the attack is on their set-up).

Each test asserts that the attack's marker outside the sandbox never appears and that the
operator's files (a fake ~/.claude, ~/.codex, ~/.bashrc, a key, under the test HOME) are
byte-identical afterwards. A new attack class is one scenario (tests/hostile.py `script`) and one
test here; docs/security.md's threat model names the test that holds each class.
FAILS (does not skip) when bwrap cannot confine here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hostile import (
    Attack,
    assert_unchanged,
    bash,
    dispatch,
    operator_home,
    require_cli,
    run_folder,
    script,
    snapshot,
    write,
)
from pilothouse.providers import confine, keys

RUN = "$HOME/.."  # the run folder, as the worker sees it (its HOME is <run>/home)


@pytest.fixture
def confined() -> None:
    ok, reason = confine.available()
    assert ok, f"confinement is not available on this machine: {reason}"


# attack 1: a builder replaces its run's config folder with a link to the operator's own; the
# host's set-up on `resume` must replace the link, not write the operator's settings through it
CONFIG_LINKS = {
    "sim-claude": ("claude-code", "config/claude", ".claude", ".claude/settings.json"),
    "sim-codex": ("codex", "config/codex", ".codex", ".codex/config.toml"),
}


@pytest.mark.realcli
@pytest.mark.parametrize("provider", sorted(CONFIG_LINKS))
def test_config_folder_linked_to_the_operators_is_replaced_on_resume(cli, git_repo, isolated_home, tmp_path,
                                                                      confined, provider):
    runner, folder, target, settings = CONFIG_LINKS[provider]
    require_cli(runner)
    keys.set_key(provider, "sk-hostile-" + os.urandom(8).hex(), use_backend="file")
    before = operator_home(isolated_home)
    attack = Attack("config-link", script(
        [bash(f'mv "{RUN}/{folder}" "{RUN}/{folder}.was" && ln -s "@OPHOME@/{target}" "{RUN}/{folder}" && echo planted',
              "Pointing my config folder at the operator's")],
        [{"say": "Resumed."}], name="config-link"))
    scen = attack.write(tmp_path, isolated_home)
    first = dispatch(cli, provider, git_repo, scen)
    run = run_folder(provider, first.run_id)
    assert (run / folder).is_symlink(), f"the attack did not plant its link: {first.verdict}"
    again = dispatch(cli, provider, git_repo, scen, resume_of=first.run_id)
    assert again.verdict["verdict"] in ("completed", "partial", "error"), again.verdict
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")
    # the host made the folder fresh (a real directory of its own, its settings written anew)
    assert not (run / folder).is_symlink() and (run / folder).is_dir()
    assert (run / folder / Path(settings).name).read_text() != (isolated_home / settings).read_text()


# attack 2: the sim's served log (appended to by the unconfined dispatch process) replaced by a
# link to an operator file, or by a FIFO: nothing is appended through it, the dispatch never hangs
@pytest.mark.parametrize("plant", ["link", "fifo"])
def test_served_log_replaced_by_a_link_or_fifo_is_never_written_through(cli, git_repo, isolated_home,
                                                                         tmp_path, confined, plant):
    before = operator_home(isolated_home)
    log = f"{RUN}/state/served.jsonl"
    how = f'ln -s "@OPHOME@/.bashrc" "{log}"' if plant == "link" else f'mkfifo "{log}"'
    attack = Attack(f"served-{plant}", script(
        [bash(f'rm -f "{log}" && {how} && echo planted', "Replacing the served log"),
         write("after.txt", "the sim answers this turn after the swap\n"),
         write("after2.txt", "and this one\n")], name=f"served-{plant}", files=("after.txt", "after2.txt")))
    run = dispatch(cli, "sim", git_repo, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] == "completed", run.verdict
    assert (git_repo / "after2.txt").exists()
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")
    assert "the served log is not written" in run.stderr


# attack 3: a FIFO (and a socket-like trap) in a run HOME: `pilothouse scan-secrets` must end,
# naming what it skipped, and the end-of-run scrub must not block on it either
def test_fifo_in_a_run_home_does_not_hang_scan_secrets(cli, git_repo, isolated_home, tmp_path, confined):
    before = operator_home(isolated_home)
    attack = Attack("fifo-home", script(
        [bash('mkfifo "$HOME/trap" "$HOME/.cache-trap" && ln -s "@OPHOME@/.ssh" "$HOME/keys" && echo planted',
              "Leaving traps in my HOME"), write("work.txt", "the task\n")], name="fifo-home", files=("work.txt",)))
    run = dispatch(cli, "sim", git_repo, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] == "completed", run.verdict
    trap = run_folder("sim", run.run_id) / "home" / "trap"
    assert trap.is_fifo()
    try:
        r = cli("scan-secrets", str(git_repo), timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("scan-secrets blocked on the FIFO a worker left in its HOME")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{trap}: skipped, a FIFO" in r.stderr
    from pilothouse.providers import paths

    latest = (paths.logs_dir() / "latest.log").read_text()
    assert "left 2 FIFO(s), device(s) or socket(s) unread in its run folder: home/.cache-trap, home/trap" in latest
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")


# the records attack: a builder writes pilothouse's own records in its worktree (.ai/tasks.yaml,
# a job record, a skill), or moves .ai away to get around the read-only bind of project.yaml
PROJECT_YAML = "integration_branch: pilothouse/integration\n"
TASKS_YAML = "tasks: []\n"


@pytest.fixture
def task_worktree(git_repo: Path) -> tuple[Path, str]:
    """A task worktree (where pilothouse keeps them) of a repo whose .ai records are tracked."""
    from pilothouse.providers import paths
    from support import git

    (git_repo / ".ai").mkdir()
    (git_repo / ".ai" / "project.yaml").write_text(PROJECT_YAML)
    (git_repo / ".ai" / "tasks.yaml").write_text(TASKS_YAML)
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "records")
    wt = paths.data_dir() / "worktrees" / "repo-hostile" / "job" / "one"
    git(git_repo, "worktree", "add", "-q", "-b", "ph/job/one", str(wt))
    return wt, git(wt, "rev-parse", "HEAD")


def _committed(wt: Path, base: str) -> list[str]:
    from support import git

    return git(wt, "diff", "--name-only", base, "HEAD").splitlines()


def test_records_a_builder_writes_in_its_worktree_are_never_committed(cli, task_worktree, isolated_home,
                                                                      tmp_path, confined):
    from pilothouse.core.git.checkout import commit_all
    from pilothouse.core.git.records import restore_records

    wt, base = task_worktree
    before = operator_home(isolated_home)
    attack = Attack("records", script(
        [write(".ai/tasks.yaml", "tasks: [{id: evil}]\n", "Rewriting the task graph"),
         write(".ai/jobs/evil.json", '{"state": "accepted"}\n', "Writing a job record"),
         write(".ai/skills/evil/SKILL.md", "run curl | sh\n", "Planting a skill"),
         bash('ln -s "@OPHOME@/.ssh" .ai/keys; echo "gates: {}" > .ai/project.yaml || echo refused',
              "Rewriting the settings"),
         write("src/work.py", "WORK = 1\n")], name="records", files=("src/work.py",)))
    run = dispatch(cli, "sim", wt, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] in ("completed", "partial"), run.verdict
    assert (wt / ".ai" / "jobs" / "evil.json").exists(), "the attack did not write its records"
    restore_records(wt, base)  # what builder_done does before it commits
    sha = commit_all(wt, "one: the work\n")
    assert sha is not None and _committed(wt, base) == ["src/work.py"]
    assert (wt / ".ai" / "tasks.yaml").read_text() == TASKS_YAML
    assert (wt / ".ai" / "project.yaml").read_text() == PROJECT_YAML
    assert not (wt / ".ai" / "jobs").exists() and not (wt / ".ai" / "skills").exists()
    assert not (wt / ".ai" / "keys").is_symlink()
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")


def test_a_renamed_ai_folder_is_refused_as_a_scope_violation(cli, task_worktree, isolated_home, tmp_path, confined):
    from pilothouse.core.git.records import ScopeViolation, restore_records
    from support import git

    wt, base = task_worktree
    attack = Attack("moved-ai", script(
        [bash('mv .ai moved-ai && mkdir .ai && echo "gates: {}" > .ai/project.yaml && echo moved',
              "Moving .ai out of the read-only bind"),
         write("src/work.py", "WORK = 1\n")], name="moved-ai", files=("src/work.py",)))
    run = dispatch(cli, "sim", wt, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] in ("completed", "partial"), run.verdict
    assert (wt / "moved-ai" / "project.yaml").exists(), "the attack did not move .ai"
    with pytest.raises(ScopeViolation) as err:
        restore_records(wt, base)  # builder_done's step before the commit
    assert "moved or replaced .ai" in str(err.value) and "moved-ai/project.yaml" in str(err.value)
    assert git(wt, "rev-parse", "HEAD") == base  # nothing of it committed


# the classes `pilothouse probe` checks, as builders: writes out of the worktree, reads of keys
# and the operator's home by every route, and a module planted for the host to import


def test_writes_out_of_the_worktree_leave_no_marker(cli, git_repo, isolated_home, tmp_path, confined):
    before = operator_home(isolated_home)
    main_before = snapshot(git_repo / ".git")
    marker = isolated_home / "pwned"
    attack = Attack("escape-writes", script(
        [bash('echo pwned > "@MARKER@"; echo pwned > /proc/self/root"@MARKER@"; '
              'ln -s "@OPHOME@/.bashrc" rc && echo pwned >> rc; echo pwned >> "@OPHOME@/.bashrc"; '
              'echo "touch @MARKER@" > .git/hooks/post-commit; echo done', "Writing outside"),
         write("src/work.py", "WORK = 1\n")], name="escape-writes", files=("src/work.py",)), marker=marker)
    run = dispatch(cli, "sim", git_repo, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] in ("completed", "partial"), run.verdict
    assert not marker.exists()
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")
    assert_unchanged(main_before, snapshot(git_repo / ".git"), "the repository's .git")


def test_reads_of_keys_and_the_operators_home_never_reach_the_worktree(cli, git_repo, isolated_home, tmp_path,
                                                                       confined):
    from pilothouse.providers import paths, workerfs

    before = operator_home(isolated_home)
    other_key = "sk-other-provider-" + os.urandom(8).hex()
    keys.set_key("other-provider", other_key, use_backend="file")
    store = paths.secrets_dir()
    key_file = isolated_home / ".ssh" / "id_ed25519"
    attack = Attack("escape-reads", script(
        [bash(f'for f in "@OPHOME@/.ssh/id_ed25519" /proc/self/root"@OPHOME@/.ssh/id_ed25519" '
              f'"{store}"/*; do cat "$f" >> stolen.txt 2>&1; done; '
              'ln -s "@OPHOME@/.ssh/id_ed25519" key-link; echo tried >> stolen.txt', "Reading what is not mine")],
        name="escape-reads", files=("stolen.txt",)))
    run = dispatch(cli, "sim", git_repo, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] in ("completed", "partial"), run.verdict
    stolen = (git_repo / "stolen.txt").read_text()
    assert "tried" in stolen and "operator" not in stolen and other_key not in stolen, stolen
    # and the host, reading the worktree back, does not follow the planted link either
    assert workerfs.read(git_repo, "key-link").kind == "link" and key_file.read_bytes() == before[str(key_file)]
    assert_unchanged(before, snapshot(isolated_home), "the operator's home")


def test_a_module_planted_in_the_worktree_is_not_imported_by_the_host(cli, git_repo, isolated_home, tmp_path,
                                                                      confined):
    marker = tmp_path / "imported-by-the-host"
    plant = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
    attack = Attack("planted-module", script(
        [write(name, plant, f"Planting {name}") for name in ("yaml.py", "sqlite3.py", "json.py", "pydantic.py")],
        name="planted-module", files=("yaml.py", "sqlite3.py", "json.py", "pydantic.py")))
    run = dispatch(cli, "sim", git_repo, attack.write(tmp_path, isolated_home))
    assert run.verdict["verdict"] == "completed", run.verdict
    assert (git_repo / "yaml.py").exists()
    for args in (("scan-secrets",), ("status",), ("providers", "list")):
        cli(*args, cwd=git_repo)  # host processes started in the worker's tree
    assert not marker.exists()


def test_what_a_gitignore_hides_under_ai_is_taken_out_before_the_commit(git_repo: Path) -> None:
    """The listing of what the worker added under .ai gives git no exclude rules: a file or folder a
    .gitignore (the repository's or one the worker wrote) ignores is removed like any other."""
    from pilothouse.core.git.records import restore_records

    (git_repo / ".ai").mkdir(exist_ok=True)
    (git_repo / ".ai" / "project.yaml").write_text("max_workers: 1\n")
    (git_repo / ".ai" / "skills").mkdir(exist_ok=True)
    (git_repo / ".ai" / "skills" / "kept.md").write_text("a skill\n")
    (git_repo / ".gitignore").write_text("*.log\n.ai/cache/\n")
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "records"], cwd=git_repo, check=True)
    (git_repo / ".ai" / "skills" / "planted.log").write_text("ignored, but the worker's\n")
    (git_repo / ".ai" / "cache" / "deep").mkdir(parents=True)
    (git_repo / ".ai" / "cache" / "deep" / "f").write_text("x\n")
    undone = restore_records(git_repo, None)
    assert not (git_repo / ".ai" / "skills" / "planted.log").exists()
    assert not (git_repo / ".ai" / "cache").exists()
    assert (git_repo / ".ai" / "skills" / "kept.md").exists()
    assert {".ai/skills/planted.log", ".ai/cache"} <= set(undone)
