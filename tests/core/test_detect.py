"""init finds the test command the repository itself uses, says where, and names the interpreter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pilothouse.core.records.detect import detect


def _venv(root: Path) -> Path:
    """A real virtualenv in the repository (no pip: only its interpreter matters here)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")], check=True)
    return root / ".venv" / "bin" / "python"


def _copy_pytest_into(site: Path) -> None:
    import importlib.util

    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "pygments"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / origin.parent.name)
        else:
            shutil.copy(origin, site / origin.name)


def test_ci_workflow_wins_and_a_python_gate_names_the_repositorys_virtualenv(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "ci.yml").write_text("""
name: ci
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: |
          pip install -e . pytest
          python -m pytest --doctest-modules --ignore benchmark
""")
    py = _venv(tmp_path)
    found = detect(tmp_path)
    assert found is not None
    assert found.fast == found.full == f"{py.absolute()} -m pytest --doctest-modules --ignore benchmark"
    assert ".github/workflows/ci.yml (job test) runs 'python -m pytest" in found.why and "virtualenv .venv/" in found.why
    done = subprocess.run(f"{found.fast} --version", shell=True, capture_output=True, text=True)
    assert "pytest" in (done.stdout + done.stderr) or "No module named pytest" in done.stderr  # that python ran


def test_tox_commands_give_the_pytest_arguments(tmp_path: Path) -> None:
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py311\n\n[testenv]\ndeps = pytest\n"
                                      "commands =\n    pytest {posargs} -x tests/unit\n")
    found = detect(tmp_path)
    assert found is not None and found.fast.endswith("-m pytest -x tests/unit") and found.fast.startswith("/")
    assert found.why.startswith("tox.ini [testenv] (env py311) runs '-m pytest -x tests/unit'") or \
        found.why.startswith("tox.ini [testenv] (env py311) runs 'pytest -x tests/unit'"), found.why


def test_pytest_cov_options_are_dropped_so_a_gate_leaves_no_coverage_files_behind(tmp_path: Path) -> None:
    # humanize 4.9.0's tox.ini: every gate would leave htmlcov/, coverage.xml and .coverage in the worktree
    (tmp_path / "tox.ini").write_text("[tox]\nrequires =\n    tox>=4.2\nenv_list =\n    py{312, 311}\n\n"
                                      "[testenv]\nextras =\n    tests\ncommands =\n    {envpython} -m pytest \\\n"
                                      "      --cov humanize \\\n      --cov tests \\\n      --cov-report html \\\n"
                                      "      --cov-report term \\\n      --cov-report xml \\\n      {posargs}\n")
    py = _venv(tmp_path)
    found = detect(tmp_path)
    assert found is not None and found.fast == f"{py.absolute()} -m pytest", found.fast
    # the = forms, a --cov with no source before an option, the flags, and a CI line: the same
    _workflow(tmp_path, "ci.yml", "python -m pytest --cov --cov-branch -x --cov=src --cov-report=xml:out/c.xml "
                                  "--cov-report annotate --cov-config .coveragerc --cov-fail-under=90 "
                                  "--no-cov-on-fail --cov-append tests/unit")
    found = detect(tmp_path)
    assert found is not None and found.fast == f"{py.absolute()} -m pytest -x tests/unit", found.fast


def test_nox_makefile_node_by_lockfile_cargo_go(tmp_path: Path) -> None:
    nox = tmp_path / "nox"
    nox.mkdir()
    (nox / "noxfile.py").write_text("import nox\n\n@nox.session\ndef tests(session):\n"
                                    "    session.run('pytest', '-q', '--strict-markers')\n")
    assert detect(nox).fast.endswith("-m pytest -q --strict-markers")  # type: ignore[union-attr]
    make = tmp_path / "make"
    make.mkdir()
    (make / "Makefile").write_text("all:\n\tcc x.c\n\ntest: all\n\t./run-tests\n")
    assert detect(make).gates() == {"fast": "make test", "full": "make test"}  # type: ignore[union-attr]
    for lock, tool in (("pnpm-lock.yaml", "pnpm"), ("yarn.lock", "yarn"), ("package-lock.json", "npm")):
        node = tmp_path / tool
        node.mkdir()
        (node / "package.json").write_text(json.dumps({"scripts": {"test": "vitest run"}}))
        (node / lock).write_text("")
        found = detect(node)
        assert found is not None and found.fast == f"{tool} test" and lock in found.why
    cargo = tmp_path / "cargo"
    cargo.mkdir()
    (cargo / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    assert detect(cargo).fast == "cargo test"  # type: ignore[union-attr]
    go = tmp_path / "go"
    go.mkdir()
    (go / "go.mod").write_text("module x\n")
    assert detect(go).fast == "go test -v ./..."  # type: ignore[union-attr]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("nothing to test\n")
    assert detect(empty) is None


def test_init_says_what_it_found_and_why(git_repo: Path, cli) -> None:
    r = cli("init", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    found = next(line for line in r.stdout.splitlines() if line.strip().startswith("found:"))
    assert "pytest settings or tests found (tests/test_*.py)" in found
    assert (shutil.which("python3") or "") in r.stdout


def test_files_that_are_links_or_fifos_are_not_read(tmp_path: Path) -> None:
    """A workflow that is a FIFO must not hang init; a link to a file outside the repository must
    not decide a gate (its text would end up in project.yaml)."""
    import os

    outside = tmp_path / "outside-Makefile"
    outside.write_text("test:\n\t./exfiltrate\n")
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    os.mkfifo(repo / ".github" / "workflows" / "ci.yml")
    (repo / "Makefile").symlink_to(outside)
    assert detect(repo) is None
    (repo / "Makefile").unlink()
    (repo / "Makefile").write_text("test:\n\t./run-tests\n")
    assert detect(repo).gates() == {"fast": "make test", "full": "make test"}  # type: ignore[union-attr]


def test_init_shares_the_virtualenv_its_gate_names_so_the_gate_runs_confined(git_repo: Path, cli) -> None:
    from pilothouse.core.git.gates import run_gate
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.records.project import load_project
    from pilothouse.providers import paths

    py = _venv(git_repo)
    # pytest installed into this venv (copied from pilothouse's: no index here). Not a .pth to
    # pilothouse's own site-packages: a gate never sees pilothouse's venv
    site = next((git_repo / ".venv" / "lib").glob("python*/site-packages"))
    _copy_pytest_into(site)
    r = cli("init", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert "sandbox.share: .venv" in r.stdout
    project = load_project(find_repo(git_repo))
    assert project.sandbox.share == [".venv"] and project.gates["fast"].startswith(str(py.absolute()))
    wt = paths.data_dir() / "worktrees" / "t"
    wt.parent.mkdir(parents=True, exist_ok=True)  # init's proof of the gates made it already
    subprocess.run(["git", "worktree", "add", "-q", "-b", "t", str(wt)], cwd=git_repo, check=True)
    res = run_gate(project, "fast", wt)  # confined: the main checkout is hidden apart from what is shared
    assert res.passed, (res.reason, res.output_tail)
    assert res.toolchain is not None and "(venv of Python" in res.toolchain


def test_init_without_a_key_puts_every_role_on_the_simulator_labelled_so_a_job_runs_at_once(
        git_repo: Path, tmp_path: Path, cli) -> None:
    import yaml
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.state import store
    from pilothouse.core.supervisor import control as supervisor_ctl

    r = cli("init", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert "roles: sim (simulator)" in r.stdout and "docs/scenarios.md" in r.stdout
    policy = yaml.safe_load((git_repo / ".ai" / "project.yaml").read_text())["model_policy"]
    assert policy["roles"] == {"coordinator": "sim", "reviewer": "sim"}
    assert "sim (simulator)" in cli("models", cwd=git_repo).stdout
    subprocess.run(["git", "add", "-A"], cwd=git_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=git_repo, check=True)
    (tmp_path / "req.md").write_text("Add a notes file.\n")
    assert cli("job", "create", "first", "--request-file", str(tmp_path / "req.md"), cwd=git_repo).returncode == 0
    layout = find_repo(git_repo)
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "first", "--timeout", "120", cwd=git_repo, timeout=150)
    finally:
        supervisor_ctl.stop(layout)
    assert w.returncode == 3, (w.stdout, w.stderr)  # it ran, and waits: the simulator has no script here
    conn = store.connect(layout.state_db, readonly=True)
    summary = conn.execute("SELECT summary FROM problems WHERE job = 'first'").fetchone()["summary"]
    conn.close()
    assert "sim (simulator) has no scripted plan" in summary and "--sim-scenario" in summary
    assert "assigner (plan) on sim (simulator)" in cli("live", cwd=git_repo).stdout

    # with a key stored, init leaves the roles to the operator
    other = tmp_path / "other"
    shutil.copytree(git_repo, other, ignore=shutil.ignore_patterns(".ai"))
    assert cli("key", "set", "glm", "--from-stdin", "--backend", "file", input="sk-test-0000\n").returncode == 0
    assert cli("init", "--force", cwd=other).returncode == 0
    assert yaml.safe_load((other / ".ai" / "project.yaml").read_text())["model_policy"]["roles"] == {}


def _workflow(root: Path, name: str, run: str) -> None:
    wf = root / ".github" / "workflows"
    wf.mkdir(parents=True, exist_ok=True)
    body = "\n".join(f"          {line}" for line in run.splitlines())
    (wf / name).write_text(f"on: [push]\njobs:\n  main:\n    runs-on: ubuntu-latest\n    steps:\n"
                           f"      - uses: actions/checkout@v4\n      - run: |\n{body}\n")


def test_a_lint_workflow_is_passed_over_for_the_one_that_runs_the_tests(tmp_path: Path) -> None:
    """lint.yml sorts first and runs `tox -e lint`; pytest.yml runs the tox env of the tests: the
    gate is what that env runs (doctest flags kept), with the repository's venv, tox not needed."""
    _workflow(tmp_path, "lint.yml", "pip install tox\ntox -e lint")
    _workflow(tmp_path, "pytest.yml", "pip install tox\ntox -e py")
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = lint,py{38,39,310}\n\n[testenv]\ndeps = pytest\n"
                                      "commands =\n    pytest --doctest-modules --doctest-glob='*.rst' {posargs}\n\n"
                                      "[testenv:lint]\ndeps = pre-commit\ncommands = pre-commit run --all-files\n")
    py = _venv(tmp_path)
    found = detect(tmp_path)
    assert found is not None
    assert found.fast == f"{py.absolute()} -m pytest --doctest-modules '--doctest-glob=*.rst'"
    assert found.why.startswith(".github/workflows/pytest.yml (job main) runs `tox -e py`: tox.ini [testenv]")
    assert "passed over: .github/workflows/lint.yml (job main), runs `tox -e lint`: tox.ini [testenv:lint] is lint-only" \
        in found.why
    from pilothouse.core.records.detect import share_of

    assert share_of(tmp_path, found.gates()) == [".venv"]


def test_tox_run_with_a_built_wheel_resolves_to_the_commands_of_its_default_env(tmp_path: Path) -> None:
    _workflow(tmp_path, "ci.yml", "python -m build\ntox run --installpkg dist/*.whl")
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py{39,310}, mypy\n\n[testenv]\n"
                                      "commands =\n    pytest {posargs:tests} -m \"not slow\" -p no:cacheprovider\n"
                                      "\n[testenv:mypy]\ncommands = mypy src\n")
    py = _venv(tmp_path)
    found = detect(tmp_path)
    assert found is not None and found.fast == f"{py.absolute()} -m pytest tests -m 'not slow' -p no:cacheprovider"
    assert "dist/" not in found.fast and "(env py39)" in found.why


def test_npm_test_that_lints_first_and_audits_after_gives_the_test_runner_alone(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {
        "lint": "eslint --ext=.js,.mjs .", "pretest": "npm run lint", "tests-only": "nyc tape 'test/*'",
        "test": "npm run tests-only", "posttest": "aud --production"}}))
    found = detect(tmp_path)
    assert found is not None and found.fast == "node_modules/.bin/tape 'test/*'"
    assert "test → tests-only" in found.why and "pretest runs 'npm run lint'" in found.why
    assert "posttest runs 'aud --production'" in found.why
    # a plain test script stays `npm test`; one the runner cannot be told apart in is kept, with a warning
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "tape test/*.js"}}))
    assert detect(tmp_path).fast == "npm test"  # type: ignore[union-attr]
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"pretest": "eslint .", "test": "./run.sh"}}))
    found = detect(tmp_path)
    assert found is not None and found.fast == "npm test" and "also runs more than the tests" in found.warnings[0]


def test_a_bare_python_given_to_init_is_the_repositorys_venv_and_the_venv_is_shared(git_repo: Path, cli) -> None:
    import yaml

    py = _venv(git_repo)
    r = cli("init", "--gate-fast", "python -m pytest -q -x", "--gate-full", "pytest", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    gates = yaml.safe_load((git_repo / ".ai" / "project.yaml").read_text())["gates"]
    assert gates["fast"] == f"{py.absolute()} -m pytest -q -x"
    assert gates["full"] == "pytest"  # no pytest in that venv: left as given (and proving would say so)
    assert "sandbox.share: .venv" in r.stdout and "resolved to the repository's virtualenv" in r.stdout


def test_a_gate_never_runs_pilothouses_own_venv_and_a_bare_python_is_the_shared_one(git_repo: Path) -> None:
    import os

    from pilothouse.core.git.gates import run_command

    py = _venv(git_repo)
    settings = {"confinement": "off", "sandbox_share": [".venv"]}
    res = run_command("python -c 'import sys; print(sys.prefix)'; echo \"$PATH\"", git_repo, settings=settings)
    assert res.passed, res.output_tail
    prefix, path = res.output_tail.splitlines()[:2]
    assert Path(prefix) == py.parent.parent.absolute()
    own = Path(sys.prefix) / "bin"
    assert str(own) not in path.split(os.pathsep) or sys.prefix == sys.base_prefix


def test_init_dry_run_lists_every_candidate_and_why_and_writes_nothing(git_repo: Path, cli) -> None:
    _workflow(git_repo, "lint.yml", "ruff check .")
    _workflow(git_repo, "tests.yml", "python -m pytest -q tests")
    r = cli("init", "--dry-run", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    assert not (git_repo / ".ai" / "project.yaml").exists()
    lines = r.stdout.splitlines()
    assert any(line.startswith("* .github/workflows/tests.yml (job main):") for line in lines), r.stdout
    assert any(".github/workflows/lint.yml (job main): (not a gate) — lint or build only" in line for line in lines)
    assert any(line.startswith("+ tests/test_*.py:") for line in lines)  # found, ranked lower
    assert lines[-1] == "nothing written (--dry-run)"
    j = cli("init", "--dry-run", "--json", cwd=git_repo)
    data = json.loads(j.stdout)
    assert data["written"] is False and data["candidates"][0]["where"] == ".github/workflows/tests.yml (job main)"
