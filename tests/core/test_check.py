"""`pilothouse check` (core/records/check.py) and what loading project.yaml refuses by itself:
every finding one line naming the file and field with the fix; `job start` refuses on any."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def repo(git_repo: Path, cli) -> Path:
    r = cli("init", "--gate-fast", "true", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    return git_repo


def _set(repo: Path, old: str, new: str) -> None:
    py = repo / ".ai/project.yaml"
    text = py.read_text()
    assert old in text
    py.write_text(text.replace(old, new))


def _refused(r, *words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_a_fresh_project_passes_and_review_off_is_the_word(repo: Path, cli) -> None:
    _set(repo, "review: once", "review: off")  # YAML 1.1 would read a boolean here
    r = cli("check", cwd=repo)
    assert r.returncode == 0 and "fit to run a job" in r.stdout, r.stderr


@pytest.mark.parametrize(("old", "new", "words"), [
    # init with no key configured: every role on the simulator
    ("roles: {coordinator: sim, reviewer: sim}", "roles: {coordinator: claude-cod}",
     ("model_policy.roles.coordinator: unknown provider 'claude-cod'", "did you mean claude-code?")),
    ("simulator: {provider: sim}", "fast: {provider: nosuch}",
     ("model_policy.assignments.fast.provider: unknown provider 'nosuch'",)),
    ("max_workers: 2", "max_workers: 2\nsim_scenario: /etc/passwd", ("sim_scenario: /etc/passwd is not where",)),
    ("max_workers: 2", "max_workers: 2\nsim_scenario: scenarios/gone.yaml",
     ("sim_scenario: scenarios/gone.yaml: no such scenario file",)),
    ('fast: "true"', 'fast: "tr\\0ue"', (".ai/project.yaml:5: gates: gate 'fast' has a NUL byte",)),
    ("setup: []", 'setup: ["npm\\0ci"]', ("setup: command 1 has a NUL byte",)),
    ("max_workers: 2", "max_worker: 2", ("max_worker: unknown key", "did you mean max_workers?")),
    ("max_workers: 2", "max_workers: 2\nmax_workers: 3", ("duplicate key 'max_workers'",)),
    # a cluster nothing answers at: joining it would hang every cluster run without a word
    ("max_workers: 2", "max_workers: 2\nexecutor: ray\nray: {address: '127.0.0.1:1'}",
     ("ray.address in .ai/project.yaml: no Ray head answers at 127.0.0.1:1 (Connection refused)",)),
])
def test_check_and_job_start_refuse_what_the_settings_cannot_run(repo: Path, cli, old: str, new: str,
                                                                 words: tuple[str, ...]) -> None:
    _set(repo, old, new)
    _refused(cli("check", cwd=repo), ".ai/project.yaml", *words)
    _refused(cli("job", "start", cwd=repo), *words)
    assert not (repo / ".ai/runtime/supervisor.log").exists()  # nothing was launched


def test_a_scenario_of_the_repository_must_be_a_scenario(repo: Path, cli) -> None:
    (repo / "scen.yaml").write_text("name: x\ndescription: y\nscripts: []\n")
    _set(repo, "max_workers: 2", "max_workers: 2\nsim_scenario: scen.yaml")
    _refused(cli("check", cwd=repo), "sim_scenario: ", "scen.yaml: scripts")
