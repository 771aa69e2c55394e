"""Gate counts: real runner output (kept under fixtures/gate_counts/) and live gate runs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pilothouse.core.git.gate_counts import counts_of, parse_cargo, parse_go_json, parse_junit, parse_summary
from pilothouse.core.git.gates import run_gate
from pilothouse.core.records.project import ProjectConfig
from support import git, guard

FIX = Path(__file__).parent / "fixtures" / "gate_counts"
# test_mix.py (fixture source): 3 passed, 2 failed (one a unittest case), 2 skipped (one unittest),
# 1 xfailed, 1 error in a fixture
MIX = {"collected": 9, "passed": 3, "failed": 2, "skipped": 2, "xfailed": 1, "errors": 1}


def counts(c: object) -> dict[str, int]:
    assert c is not None
    d = c.to_dict()  # type: ignore[attr-defined]
    return {k: d[k] for k in MIX}


def test_pytest_junit_report_counts_every_outcome_including_unittest_cases() -> None:
    c = parse_junit((FIX / "pytest_junit.xml").read_bytes())
    assert counts(c) == MIX and c is not None and c.source == "junit"


@pytest.mark.parametrize("name", ["pytest_output.txt", "pytest_q_output.txt"])
def test_pytest_summary_line_gives_the_same_counts_without_a_report(name: str) -> None:
    c = parse_summary((FIX / name).read_text())
    assert counts(c) == MIX and c is not None and c.source == "pytest"


def test_cargo_sums_every_test_binary_and_counts_ignored_as_skipped() -> None:
    # lib: 1 passed 1 failed 1 ignored; tests/more.rs: 2 passed; doctests: 1 passed
    c = parse_cargo((FIX / "cargo_output.txt").read_text())
    assert counts(c) == {"collected": 6, "passed": 4, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


def test_tape_and_node_test_tap_trailers_are_counted() -> None:
    # tape 5 on a file with two assertions passing, one failing and a skipped test (assertions counted)
    c = counts_of((FIX / "tape_output.txt").read_text())
    assert counts(c) == {"collected": 3, "passed": 2, "failed": 1, "skipped": 0, "xfailed": 0, "errors": 0}
    assert c is not None and c.source == "tap"
    # node 20's --test-reporter=tap: one passes, one fails, one skipped, one todo
    c = counts_of((FIX / "node_test_tap.txt").read_text())
    assert counts(c) == {"collected": 4, "passed": 1, "failed": 1, "skipped": 2, "xfailed": 0, "errors": 0}


def test_a_tap_stream_without_a_trailer_is_counted_by_its_ok_lines() -> None:
    c = counts_of("TAP version 13\nok 1 - a\nnot ok 2 - b\nok 3 - c # SKIP later\n1..3\n")
    assert counts(c) == {"collected": 3, "passed": 1, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


def test_go_test_verbose_counts_every_test_and_subtest() -> None:
    # go-difflib 1.0.0's own tests, `go test -v ./...` (what init proposes for a Go module)
    c = counts_of((FIX / "go_test_v_output.txt").read_text())
    assert c is not None and c.source == "go-v" and c.collected == c.passed == 17
    c = counts_of("=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n=== RUN   TestB/x\n"
                  "    --- SKIP: TestB/x (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\n")
    assert counts(c) == {"collected": 3, "passed": 1, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


def test_mocha_summary_is_counted() -> None:
    c = counts_of("\n  3 passing (12ms)\n  1 pending\n  2 failing\n\n  1) x:\n")
    assert counts(c) == {"collected": 6, "passed": 3, "failed": 2, "skipped": 1, "xfailed": 0, "errors": 0}


def test_output_without_any_summary_gives_no_counts_rather_than_zeros() -> None:
    assert counts_of("compiling...\nall good\n") is None
    assert parse_junit(b"not xml <") is None
    assert parse_go_json("ok  \texample.com/m\t0.01s\n") is None


def test_a_report_with_a_doctype_is_not_parsed() -> None:
    bomb = b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaa">]><testsuite><testcase name="x"/></testsuite>'
    assert parse_junit(bomb) is None


def test_live_pytest_gate_records_counts_from_its_junit_report_through_the_sandbox(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_mix.py").write_text((FIX / "test_mix.py.txt").read_text())
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    cfg = ProjectConfig.model_validate({"gates": {"fast": "true", "full": f"{sys.executable} -m pytest -q -p no:cacheprovider"}})
    res = run_gate(cfg, "full", repo)
    assert not res.passed and res.changed_files == []  # the report went through a descriptor, not the tree
    assert res.counts is not None and res.counts["source"] == "junit"
    assert {k: res.counts[k] for k in MIX} == MIX


def test_live_unittest_gate_records_counts_from_its_summary(tmp_path: Path) -> None:
    repo = tmp_path / "ut"
    repo.mkdir()
    (repo / "test_legacy.py").write_text(
        "import unittest\n\n\nclass Legacy(unittest.TestCase):\n    def test_ok(self):\n        pass\n\n"
        "    def test_bad(self):\n        self.assertEqual(1, 2)\n\n    @unittest.skip('later')\n"
        "    def test_later(self):\n        pass\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    cfg = ProjectConfig.model_validate({"gates": {"fast": f"{sys.executable} -m unittest", "full": "true"}})
    res = run_gate(cfg, "fast", repo)
    assert not res.passed and res.counts is not None and res.counts["source"] == "unittest", res.output_tail
    assert {k: res.counts[k] for k in MIX} == {
        "collected": 3, "passed": 1, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
def test_live_cargo_gate_records_counts_from_its_summary(tmp_path: Path) -> None:
    repo = tmp_path / "crate"
    (repo / "src").mkdir(parents=True)
    (repo / "Cargo.toml").write_text('[package]\nname = "c"\nversion = "0.1.0"\nedition = "2021"\n')
    (repo / ".gitignore").write_text("target/\nCargo.lock\n")
    (repo / "src" / "lib.rs").write_text(
        "#[cfg(test)]\nmod t {\n #[test] fn ok() {}\n #[test] #[ignore] fn slow() {}\n}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    # the crate's own target dir (ignored): a confined gate's HOME is throwaway, cargo's home is not
    cfg = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "cargo test --offline --lib"},
                                        "confinement": "off"})
    cargo_home = Path(shutil.which("cargo") or "").resolve().parent.parent  # the tests' HOME is a tmp dir
    toolchain = {"CARGO_HOME": str(cargo_home), "RUSTUP_HOME": str(cargo_home.parent / ".rustup")}
    res = run_gate(cfg, "full", repo, timeout=600, env=toolchain)
    assert res.passed, res.output_tail
    assert res.counts is not None and res.counts["source"] == "cargo"
    assert (res.counts["passed"], res.counts["skipped"], res.counts["collected"]) == (1, 1, 2)


# sum.test.js for both: 2 passed, 1 failed, 1 skipped, 1 todo (a todo is a test not run: skipped)
JS = {"collected": 5, "passed": 2, "failed": 1, "skipped": 2, "xfailed": 0, "errors": 0}


@pytest.mark.parametrize("name, source", [("jest_output.txt", "jest"), ("vitest_output.txt", "vitest")])
def test_jest_and_vitest_summary_lines_count_todo_as_skipped(name: str, source: str) -> None:
    c = parse_summary((FIX / name).read_text())  # vitest's is coloured: the escapes are dropped first
    assert counts(c) == JS and c is not None and c.source == source


def test_vitest_junit_report_counts_like_its_summary() -> None:
    assert counts(parse_junit((FIX / "vitest_junit.xml").read_bytes())) == JS


# jest-junit (16.0.0) writes a test.todo as a test case with no outcome: it reads as passed (a todo
# added in a change is still a skip to defence 1, which reads the diff)
JEST_JUNIT = {**JS, "passed": 3, "skipped": 1}


def test_jest_junit_report_counts_a_todo_as_passed_as_jest_junit_writes_it() -> None:
    assert counts(parse_junit((FIX / "jest_junit.xml").read_bytes())) == JEST_JUNIT


def test_unittest_summary_counts_its_own_failures_and_skips() -> None:
    c = parse_summary((FIX / "unittest_output.txt").read_text())  # `python -m unittest test_mix`: Legacy only
    assert counts(c) == {"collected": 3, "passed": 1, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


def test_go_json_counts_each_test_and_subtest_by_its_last_action() -> None:
    # TestAdd pass, TestBad fail, TestLater skip, TestTable and its two subtests pass
    c = parse_go_json((FIX / "go_test.json").read_text())
    assert counts(c) == {"collected": 6, "passed": 4, "failed": 1, "skipped": 1, "xfailed": 0, "errors": 0}


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_live_go_gate_records_counts_from_go_test_json(tmp_path: Path) -> None:
    repo = tmp_path / "mod"
    repo.mkdir()
    (repo / "go.mod").write_text("module example.com/m\n\ngo 1.19\n")
    (repo / "m_test.go").write_text('package m\n\nimport "testing"\n\nfunc TestOk(t *testing.T) {}\n\n'
                                    'func TestLater(t *testing.T) { t.Skip("later") }\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    res = run_gate(ProjectConfig.model_validate({"gates": {"fast": "go test -json ./...", "full": "true"}}),
                   "fast", repo, timeout=600)
    assert res.passed, res.output_tail
    assert res.counts is not None and res.counts["source"] == "go-json"
    assert (res.counts["passed"], res.counts["skipped"], res.counts["collected"]) == (1, 1, 2)


# The JS runners the live gates below use, from the npm registry: installed once and kept (tests/.cache
# is ignored by git), so only a first run on a machine downloads them
JS_PACKAGES = ("jest@29.7.0", "jest-junit@16.0.0", "vitest@1.6.1")
JS_CACHE = Path(__file__).resolve().parents[1] / ".cache" / ("gate-js-" + "-".join(p.replace("@", "") for p in JS_PACKAGES))
SUM_TEST = ("test('adds', () => { expect(1 + 2).toBe(3); });\ntest('adds again', () => { expect(2 + 2).toBe(4); });\n"
            "test('bad', () => { expect(2 + 2).toBe(5); });\ntest.skip('later', () => { expect(1).toBe(2); });\n"
            "test.todo('someday');\n")


@pytest.fixture(scope="module")
def js_runners() -> Path:
    """node_modules with jest, jest-junit and vitest (npm, pinned), shared by the test workers."""
    if shutil.which("npm") is None:
        pytest.fail("npm is not installed: scripts/test installs it (apt-get install npm)", pytrace=False)
    JS_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(JS_CACHE.parent / ".gate-js.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test worker may be installing the same packages
        if not (JS_CACHE / "node_modules" / ".bin" / "vitest").exists():
            fresh = JS_CACHE.with_name(JS_CACHE.name + ".new")
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir()
            (fresh / "package.json").write_text('{"private": true}\n')
            out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error",
                                  *JS_PACKAGES], cwd=fresh, capture_output=True, text=True, timeout=guard(600))
            assert out.returncode == 0, out.stderr[-2000:]
            shutil.rmtree(JS_CACHE, ignore_errors=True)
            os.replace(fresh, JS_CACHE)
    return JS_CACHE / "node_modules"


def js_repo(tmp_path: Path, modules: Path, test_file: str, test_text: str) -> Path:
    repo = tmp_path / "js"
    repo.mkdir()
    (repo / "package.json").write_text('{"name": "sum", "private": true}\n')
    (repo / test_file).write_text(test_text)
    (repo / ".gitignore").write_text("node_modules\n")
    (repo / "node_modules").symlink_to(modules)  # read-only inside the gate's sandbox: the runners only read it
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def test_live_jest_gate_records_counts_from_jest_junits_report_through_the_sandbox(tmp_path: Path,
                                                                                  js_runners: Path) -> None:
    repo = js_repo(tmp_path, js_runners, "sum.test.js", SUM_TEST)
    # the project's usual jest-junit setup: the gate points the report at its own descriptor
    gate = "node_modules/.bin/jest --ci --reporters=default --reporters=jest-junit"
    res = run_gate(ProjectConfig.model_validate({"gates": {"fast": gate, "full": "true"}}), "fast", repo, timeout=600)
    assert not res.passed and res.changed_files == [], res.output_tail  # no junit.xml left in the tree
    assert res.counts is not None and res.counts["source"] == "junit", res.output_tail
    assert {k: res.counts[k] for k in JS} == JEST_JUNIT


def test_live_vitest_gate_records_counts_from_its_junit_reporter_through_the_sandbox(tmp_path: Path,
                                                                                    js_runners: Path) -> None:
    repo = js_repo(tmp_path, js_runners, "sum.test.mjs", "import { test, expect } from 'vitest';\n" + SUM_TEST)
    gate = ("node_modules/.bin/vitest run --reporter=default --reporter=junit "
            "--outputFile.junit=$PILOTHOUSE_JUNIT_REPORT")
    res = run_gate(ProjectConfig.model_validate({"gates": {"fast": gate, "full": "true"}}), "fast", repo, timeout=600)
    assert not res.passed and res.changed_files == [], res.output_tail
    assert res.counts is not None and res.counts["source"] == "junit", res.output_tail
    assert {k: res.counts[k] for k in JS} == JS


def test_a_gate_event_says_its_counts_or_that_the_count_checks_are_off() -> None:
    from pilothouse.core.queries.describe import describe

    counted = describe({"type": "gate.finished", "data": {
        "level": "fast", "where": "worktree", "passed": True, "exit_code": 0, "duration_s": 1.5,
        "counts": {"collected": 9, "passed": 8, "failed": 0, "skipped": 1}, "toolchain": "/usr/bin/go"}})
    assert counted == "gate fast in worktree passed (1.5s) 9 tests: 8 passed, 0 failed, 1 skipped [ran /usr/bin/go]"
    off = describe({"type": "gate.finished", "data": {"level": "full", "where": "integration", "passed": True,
                                                      "counts_off": "…", "duration_s": 0.1}})
    assert off == "gate full in integration passed (0.1s) no counts (weakened-test count checks off)"
    failed = describe({"type": "gate.finished", "data": {"level": "fast", "passed": False, "exit_code": 1,
                                                         "reason": "gate 'fast' failed: exit 1"}})
    assert failed == "gate fast FAILED exit 1: gate 'fast' failed: exit 1"


def test_a_builders_start_says_how_long_its_worktree_took_to_set_up() -> None:
    from pilothouse.core.queries.describe import describe

    line = describe({"type": "run.started", "data": {"role": "builder", "mode": "code", "provider": "sim",
                                                     "worktree_ms": 41.5, "checkout": "pooled"}})
    assert line.endswith(", worktree pooled in 41.5ms"), line


def test_every_view_of_a_gates_counts_says_passed_failed_and_skipped_a_zero_too() -> None:
    from pilothouse.core.git.gate_counts import counts_text
    from pilothouse.core.git.prove import counts_words
    from pilothouse.core.queries.describe import describe

    counts = {"collected": 7, "passed": 5, "failed": 0, "skipped": 2, "xfailed": 0, "errors": 0, "source": "junit"}
    assert counts_text(counts) == "7 tests: 5 passed, 0 failed, 2 skipped"
    assert counts_text({**counts, "skipped": 0, "errors": 2}) == "7 tests: 5 passed, 0 failed, 0 skipped, 2 errors"
    assert counts_text(counts, " · ") == "7 tests: 5 passed · 0 failed · 2 skipped"
    assert counts_words(counts) == "7 tests: 5 passed, 0 failed, 2 skipped (junit)"  # init's proof of the gate
    line = describe({"type": "gate.finished", "data": {"level": "fast", "passed": True, "counts": counts}})
    assert line == "gate fast passed 7 tests: 5 passed, 0 failed, 2 skipped"  # live, replay, the cockpit's events
    # a log is any JSON: a count that is no number is said as unknown, never shown as it came
    assert counts_text({"collected": "<b>", "passed": True, "skipped": [1]}) == \
        "? tests: ? passed, 0 failed, ? skipped"
