"""docs/own-repo.md, followed on real third-party projects from the package registries: a fresh
repository → `init` → a job with scripted simulator builders → the project's own tests as the gate,
in a confined worktree sharing the checkout's dependency folders → `ship` onto its main branch.

In each, `init` alone proposes the gate the project itself runs for its tests (no --gate-fast),
proves it on the base with counts, `check --gates` proves it again, and the job ships with zero
edits to project.yaml.

Each project's dependencies come from its registry in the test's setup (pip / npm, cached in
PILOTHOUSE_TEST_CACHE, else /var/tmp/pilothouse-test-cache), as its operator would install them;
the Go module and the Rust crate have none, and their gates run offline.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import guard

FIXTURES = Path(__file__).parent / "fixtures" / "thirdparty"
CACHE = Path(os.environ.get("PILOTHOUSE_TEST_CACHE") or "/var/tmp/pilothouse-test-cache")

pytestmark = pytest.mark.slow


@pytest.fixture
def home_of_repos(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where the operator keeps checkouts, with their home and pilothouse's. Not under
    /tmp/pytest-of-USER: the sandbox's private /tmp shows the folders leading to a checkout, a
    worktree or a hidden home there read-only, and the project's own tests (pytest's tmp_path)
    make theirs in it."""
    base = Path(tempfile.mkdtemp(prefix="ph-own-repo-", dir="/var/tmp"))
    home = base / "home"
    shutil.copytree(isolated_home, home)
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("PILOTHOUSE_HOME", str(base / "pilothouse"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fresh_repo(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / name.rsplit("-", 1)[0]
    shutil.copytree(FIXTURES / name, repo)
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-qm", f"{name}, as published")):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def _install(argv: list[str], cwd: Path, **env: str) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=guard(600),
                          env={**os.environ, "PIP_CACHE_DIR": str(CACHE / "pip"),
                               "npm_config_cache": str(CACHE / "npm"), **env})
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])


def _scenario(path: Path, task: str, writes: list[str], turns: list[dict[str, object]]) -> Path:
    plan = {"tasks": [{"id": task, "title": task, "kind": "SAFE_PARALLEL", "expected_paths": {"write": writes}}]}
    done = {"status": "complete", "files_changed": writes, "validation": {"commands": [], "passed": True},
            "risks": []}
    path.write_text(yaml.safe_dump({"name": path.stem, "description": f"{task}, scripted", "scripts": [
        {"match": {"mode": "plan"}, "turns": [{"say": f"<!--RESULT-->{json.dumps(plan)}<!--/RESULT-->"}]},
        {"match": {"mode": "code", "contains": [f"task: {task}"]},
         "turns": [*turns, {"say": f"Done.\n<!--RESULT-->{json.dumps(done)}<!--/RESULT-->"}]},
        {"match": {"mode": "review"}, "turns": [{"say": '<!--RESULT-->{"overall":"PASS","findings":[]}<!--/RESULT-->'}]},
    ]}))
    return path


def _events(repo: Path, kind: str) -> list[dict[str, object]]:
    lines = (repo / ".ai" / "runtime" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == kind]


def _job_to_main(repo: Path, tmp_path: Path, cli, scenario: Path, job: str) -> str:
    """docs/own-repo.md steps 1 (commit), 2 and 5 with step 6's scripted simulator: the live log."""
    # -f: as init's next: line says when the project's .gitignore ignores itself (tabulate's `.*`)
    subprocess.run(["git", "add", "-f", ".ai/project.yaml", ".gitignore"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "pilothouse init"], cwd=repo, check=True)
    # proved on the committed base with zero edits to project.yaml, counts read (weakening checks on)
    c = cli("check", "--gates", cwd=repo, timeout=600)
    assert c.returncode == 0 and "the gates pass on the base commit" in c.stdout, (c.stdout, c.stderr)
    assert " tests: " in c.stdout and "no counts" not in c.stdout, c.stdout
    (tmp_path / "request.md").write_text(f"{job}: see the task.\n")
    r = cli("job", "create", job, "--request-file", str(tmp_path / "request.md"), "--sim-scenario", str(scenario),
            cwd=repo)
    assert r.returncode == 0, r.stderr
    assert cli("job", "start", cwd=repo).returncode == 0
    try:
        w = cli("job", "wait", job, "--timeout", "400", cwd=repo, timeout=420)
        live = cli("live", cwd=repo).stdout
        gates = [e["data"].get("output_tail") for e in _events(repo, "gate.finished")]
        assert w.returncode == 0, (w.stdout, w.stderr, live[-3000:], gates)
    finally:
        cli("supervisor", "stop", cwd=repo)
    try:
        s = cli("ship", job, cwd=repo)
        assert s.returncode == 0, (s.stdout, s.stderr)
    finally:
        from pilothouse.core.records.layout import find_repo
        from pilothouse.core.supervisor import control as supervisor_ctl

        supervisor_ctl.stop(find_repo(repo))  # one `ship` may have started again for other jobs
    return live


def test_a_python_project_with_a_virtualenv_and_an_editable_install(tmp_path: Path, home_of_repos: Path,
                                                                     cli) -> None:
    repo = _fresh_repo(home_of_repos, "iniconfig-1.1.1")
    # the operator's own environment: a venv with the project installed editable, and pytest
    base_python = getattr(sys, "_base_executable", sys.executable)
    _install([base_python, "-m", "venv", ".venv"], repo)
    _install([".venv/bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
              "pytest==7.4.4", "py==1.11.0", "-e", "."], repo, SETUPTOOLS_SCM_PRETEND_VERSION="1.1.1")
    r = cli("init", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "tox.ini [testenv] (env py27) runs 'pytest'" in r.stdout and "sandbox.share: .venv" in r.stdout
    assert ": passed on " in r.stdout and "(junit) in " in r.stdout, r.stdout  # init proved it
    old = "    def __init__(self, config, name):\n        self.config = config\n        self.name = name\n"
    new = old + "\n    def __repr__(self):\n        return '<SectionWrapper %r>' % (self.name,)\n"
    test = ("from iniconfig import IniConfig\n\n\ndef test_a_section_names_itself():\n"
            "    assert repr(IniConfig('x', data='[db]\\nport = 1\\n')['db']) == \"<SectionWrapper 'db'>\"\n")
    scenario = _scenario(tmp_path / "repr.yaml", "repr", ["src/iniconfig/__init__.py", "testing/test_repr.py"], [
        {"say": "Adding a repr.", "actions": [{"edit": {"path": "src/iniconfig/__init__.py", "old": old, "new": new}},
                                              {"write": {"path": "testing/test_repr.py", "content": test}}]}])
    live = _job_to_main(repo, tmp_path, cli, scenario, "repr")
    # the gate ran the checkout's venv on the task's code: the new test passes only against it
    assert f"(venv of Python {platform.python_version()} at {Path(base_python).parent})]" in live
    assert {f"{repo}/.venv/bin/python (venv of Python {platform.python_version()} at {Path(base_python).parent})"} == {
        e["data"]["toolchain"] for e in _events(repo, "gate.finished")}
    shipped = subprocess.run(["git", "show", "main:src/iniconfig/__init__.py"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout
    assert "<SectionWrapper %r>" in shipped and (repo / "testing" / "test_repr.py").is_file()


def test_an_npm_package_with_dependencies_and_its_node_modules_shared(tmp_path: Path, home_of_repos: Path,
                                                                     cli) -> None:
    repo = _fresh_repo(home_of_repos, "call-bind-1.0.2")
    # the operator's install: the package's dependencies and dev tools (tape) from npm
    _install(["npm", "install", "--no-package-lock", "--ignore-scripts", "--no-audit", "--no-fund"], repo)
    # its `npm test` lints and audits online first (pretest, posttest): init gives its tests alone
    r = cli("init", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "sandbox.share: node_modules" in r.stdout and "pretest runs 'npm run lint'" in r.stdout
    assert ": passed on " in r.stdout and "(tap) in " in r.stdout, r.stdout  # init proved it, TAP counted
    gates = yaml.safe_load((repo / ".ai" / "project.yaml").read_text())["gates"]
    assert (gates["fast"], gates["full"]) == ("node_modules/.bin/tape 'test/*'", "node_modules/.bin/tape 'test/*'")
    old = "module.exports = function callBoundIntrinsic(name, allowMissing) {\n"
    new = old + ("\tif (typeof name !== 'string') {\n"
                 "\t\tthrow new TypeError('callBound: the intrinsic name must be a string');\n\t}\n")
    test = ("'use strict';\n\nvar test = require('tape');\n\nvar callBound = require('../callBound');\n\n"
            "test('callBound names', function (t) {\n"
            "\tt['throws'](function () { callBound(42); }, /must be a string/, 'a number is refused');\n"
            "\tt.end();\n});\n")
    scenario = _scenario(tmp_path / "names.yaml", "names", ["callBound.js", "test/names.js"], [
        {"say": "Checking the name.", "actions": [{"edit": {"path": "callBound.js", "old": old, "new": new}},
                                                  {"write": {"path": "test/names.js", "content": test}}]}])
    live = _job_to_main(repo, tmp_path, cli, scenario, "names")
    # named by where it is: the checkout's folder, shared
    assert {f"{repo}/node_modules/.bin/tape -> {repo}/node_modules/tape/bin/tape"} == {
        e["data"]["toolchain"] for e in _events(repo, "gate.finished")}
    assert "node_modules/tape/bin/tape]" in live
    shipped = subprocess.run(["git", "show", "main:callBound.js"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout
    assert "must be a string" in shipped and (repo / "test" / "names.js").is_file()


def test_a_go_module_offline_with_its_own_go_test(tmp_path: Path, home_of_repos: Path, cli,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _fresh_repo(home_of_repos, "go-difflib-1.0.0")
    # the operator's Go: offline (no module proxy, nothing to download), its caches in their home
    home = Path(os.environ["HOME"])
    for var, value in (("GOPROXY", "off"), ("GOFLAGS", "-mod=mod"), ("GOCACHE", str(home / ".cache" / "go-build")),
                       ("GOPATH", str(home / "go"))):
        monkeypatch.setenv(var, value)
    # published before modules: the operator names it by its import path
    _install(["go", "mod", "init", "github.com/pmezard/go-difflib"], repo)
    subprocess.run(["git", "add", "go.mod"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "go.mod"], cwd=repo, check=True)
    r = cli("init", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "go.mod" in r.stdout and "go test -v ./..." in r.stdout, r.stdout
    assert ": passed on " in r.stdout and "(go-v) in " in r.stdout, r.stdout  # init proved it, counted
    gates = yaml.safe_load((repo / ".ai" / "project.yaml").read_text())["gates"]
    assert (gates["fast"], gates["full"]) == ("go test -v ./...", "go test -v ./...")
    old = "func SplitLines(s string) []string {\n"
    new = ("// SameLines reports whether a and b hold the same lines.\n"
           "func SameLines(a, b string) bool {\n"
           "\treturn NewMatcher(SplitLines(a), SplitLines(b)).Ratio() == 1\n}\n\n" + old)
    test = ('package difflib\n\nimport "testing"\n\n'
            "func TestSameLines(t *testing.T) {\n"
            '\tif !SameLines("a\\nb\\n", "a\\nb\\n") || SameLines("a\\nb\\n", "a\\nc\\n") {\n'
            '\t\tt.Fatal("SameLines")\n\t}\n}\n')
    scenario = _scenario(tmp_path / "same.yaml", "same", ["difflib/difflib.go", "difflib/same_test.go"], [
        {"say": "Adding SameLines.", "actions": [{"edit": {"path": "difflib/difflib.go", "old": old, "new": new}},
                                                 {"write": {"path": "difflib/same_test.go", "content": test}}]}])
    live = _job_to_main(repo, tmp_path, cli, scenario, "same")
    # the Go on PATH, named with what it links to; the new test compiles only against the task's code
    go = shutil.which("go") or "go"
    ran = go if os.path.realpath(go) == go else f"{go} -> {os.path.realpath(go)}"
    finished = _events(repo, "gate.finished")
    assert {ran} == {e["data"]["toolchain"] for e in finished} and f"[ran {ran}]" in live
    # in the task's worktree and on the integration branch: the package's own tests and the new one
    assert {"fast", "full"} <= {e["data"]["level"] for e in finished}
    assert all("ok  \tgithub.com/pmezard/go-difflib/difflib" in str(e["data"]["output_tail"]) for e in finished)
    shipped = subprocess.run(["git", "show", "main:difflib/difflib.go"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout
    assert "func SameLines(a, b string) bool" in shipped and (repo / "difflib" / "same_test.go").is_file()


def test_a_rust_crate_offline_with_its_own_cargo_test(tmp_path: Path, home_of_repos: Path, cli,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("no cargo on PATH")
    # the operator's rustup: its toolchains where they installed them (their HOME is the test's now)
    rustup = Path(os.path.realpath(cargo)).parent.parent.parent / ".rustup"
    if Path(os.path.realpath(cargo)).name == "rustup" and rustup.is_dir():
        monkeypatch.setenv("RUSTUP_HOME", str(rustup))
    repo = _fresh_repo(home_of_repos, "fnv-1.0.7")
    r = cli("init", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stderr
    gates = yaml.safe_load((repo / ".ai" / "project.yaml").read_text())["gates"]
    assert (gates["fast"], gates["full"]) == ("cargo test", "cargo test")
    # proved on the base before any worker: the crate's own unit and doc tests, counted
    proved = next(line for line in r.stdout.splitlines() if line.startswith("  gate fast/full (cargo test)"))
    assert ": passed on " in proved and " tests: " in proved and "(cargo)" in proved, r.stdout
    old = "/// A builder for default FNV hashers.\n"
    new = ("/// The 64-bit FNV-1a hash of `bytes`.\npub fn hash(bytes: &[u8]) -> u64 {\n"
           "    let mut hasher = FnvHasher::default();\n    hasher.write(bytes);\n    hasher.finish()\n}\n\n" + old)
    test = ("extern crate fnv;\n\n#[test]\nfn hash_of_nothing_is_the_offset_basis() {\n"
            "    assert_eq!(fnv::hash(b\"\"), 0xcbf29ce484222325);\n    assert_eq!(fnv::hash(b\"a\"), 0xaf63dc4c8601ec8c);\n}\n")
    scenario = _scenario(tmp_path / "hash.yaml", "hash", ["lib.rs", "tests/hash.rs"], [
        {"say": "Adding hash().", "actions": [{"edit": {"path": "lib.rs", "old": old, "new": new}},
                                              {"write": {"path": "tests/hash.rs", "content": test}}]}])
    _job_to_main(repo, tmp_path, cli, scenario, "hash")
    finished = _events(repo, "gate.finished")
    assert {"fast", "full"} <= {e["data"]["level"] for e in finished}
    # every run counted, the new integration test among them, on the task's code and on the integration branch
    assert all(e["data"]["counts"] and e["data"]["counts"]["source"] == "cargo" for e in finished)
    base = int(proved.split(" tests: ")[0].rsplit(" ", 1)[-1])
    assert all(e["data"]["counts"]["collected"] == base + 1 for e in finished), [e["data"]["counts"] for e in finished]
    shipped = subprocess.run(["git", "show", "main:lib.rs"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout
    assert "pub fn hash(bytes: &[u8]) -> u64" in shipped and (repo / "tests" / "hash.rs").is_file()


def test_a_python_library_whose_tox_runs_doctests_and_lists_a_lint_env_first(tmp_path: Path, home_of_repos: Path,
                                                                             cli) -> None:
    """tabulate 0.9.0: tox's envlist starts with `lint` (pre-commit); its test env runs
    `pytest -v --doctest-modules --ignore benchmark.py`. init gates on that, with the checkout's venv
    (tox not installed), proves it on the base, and the job's new doctest runs in the gate."""
    repo = _fresh_repo(home_of_repos, "tabulate-0.9.0")
    base_python = getattr(sys, "_base_executable", sys.executable)
    _install([base_python, "-m", "venv", ".venv"], repo)
    _install([".venv/bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "pytest==7.4.4"], repo)
    r = cli("init", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stderr
    gates = yaml.safe_load((repo / ".ai" / "project.yaml").read_text())["gates"]
    gate = f"{repo}/.venv/bin/python -m pytest -v --doctest-modules --ignore benchmark.py"
    assert (gates["fast"], gates["full"]) == (gate, gate)
    assert "sandbox.share: .venv" in r.stdout and "tox.ini [testenv:py37]" in r.stdout, r.stdout
    proved = next(line for line in r.stdout.splitlines() if line.startswith("  gate fast/full ("))
    assert ": passed on " in proved and "(junit)" in proved, r.stdout
    base = int(proved.split(" tests: ")[0].rsplit(" ", 1)[-1])
    old = "def simple_separated_format(separator):\n"
    new = ('def pipe_row(cells):\n    """One row of cells as a pipe-separated line.\n\n'
           '    >>> pipe_row(["a", 1])\n    \'a | 1\'\n    """\n'
           '    return " | ".join(str(c) for c in cells)\n\n\n' + old)
    test = ("from tabulate import pipe_row\n\n\ndef test_pipe_row_of_nothing_is_empty():\n"
            "    assert pipe_row([]) == ''\n")
    scenario = _scenario(tmp_path / "pipe.yaml", "pipe", ["tabulate/__init__.py", "test/test_pipe_row.py"], [
        {"say": "Adding pipe_row.", "actions": [{"edit": {"path": "tabulate/__init__.py", "old": old, "new": new}},
                                                {"write": {"path": "test/test_pipe_row.py", "content": test}}]}])
    _job_to_main(repo, tmp_path, cli, scenario, "pipe")
    finished = _events(repo, "gate.finished")
    # the new doctest and the new test, counted in the task's worktree and on the integration branch
    assert {"fast", "full"} <= {e["data"]["level"] for e in finished}
    assert all(e["data"]["counts"]["collected"] - base == 2 for e in finished if e["data"]["passed"]), \
        [(e["data"]["counts"], base) for e in finished]
    shipped = subprocess.run(["git", "show", "main:tabulate/__init__.py"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout
    assert "def pipe_row(cells):" in shipped
