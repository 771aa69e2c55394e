"""What a commit weakened against its base: real commits in a real repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core.git.weakening import count_delta, find, is_settings_file, is_test_file
from support import git

BASE_TEST = ("import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")


@pytest.fixture
def repo(git_repo: Path) -> Path:
    (git_repo / "tests" / "test_unit.py").write_text(BASE_TEST)
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "unit tests")
    git(git_repo, "branch", "base")
    return git_repo


def commit(repo: Path, files: dict[str, str | None]) -> None:
    for path, text in files.items():
        if text is None:
            (repo / path).unlink()
        else:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "work")


def kinds(repo: Path, **kw: object) -> set[tuple[str, str]]:
    return {(w.kind, w.path) for w in find(str(repo), "base", **kw)}  # type: ignore[arg-type]


def test_an_honest_change_that_adds_tests_and_code_weakens_nothing(repo: Path) -> None:
    commit(repo, {"src/calc.py": "def add(a, b):\n    return b + a\n",
                  "tests/test_unit.py": BASE_TEST + "\n    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"})
    assert kinds(repo) == set()


def test_each_way_of_weakening_is_named_with_its_file(repo: Path) -> None:
    commit(repo, {"tests/test_calc.py": None,
                  "tests/test_unit.py": BASE_TEST.replace("    def test_add", "    @unittest.skip('flaky')\n    def test_add"),
                  "conftest.py": "collect_ignore = ['tests']\n",
                  ".github/workflows/ci.yml": "on: push\n"})
    assert kinds(repo) == {("test_deleted", "tests/test_calc.py"), ("skip_added", "tests/test_unit.py"),
                           ("settings_changed", "conftest.py"), ("settings_changed", ".github/workflows/ci.yml")}


def test_an_assertion_replaced_by_one_that_cannot_fail_counts_as_removed(repo: Path) -> None:
    commit(repo, {"tests/test_unit.py": BASE_TEST.replace("self.assertEqual(add(2, 3), 5)", "self.assertTrue(True)")})
    assert kinds(repo) == {("assertions_removed", "tests/test_unit.py")}


def test_pyproject_counts_only_when_a_changed_line_is_a_test_or_lint_setting(repo: Path) -> None:
    commit(repo, {"pyproject.toml": "[project]\nname = 'calc'\n"})
    assert kinds(repo) == set()
    commit(repo, {"pyproject.toml": "[project]\nname = 'calc'\n\n[tool.coverage.report]\nfail_under = 10\n"})
    assert kinds(repo) == {("settings_changed", "pyproject.toml")}


def test_a_declared_path_is_exempt_only_with_a_stated_reason(repo: Path) -> None:
    commit(repo, {"tests/test_calc.py": None})
    assert kinds(repo, declared=["tests/test_calc.py"]) == {("test_deleted", "tests/test_calc.py")}
    assert kinds(repo, declared=["tests/"], reason="calc's tests moved into test_unit.py") == set()


def test_count_delta_names_fewer_collected_and_more_skipped() -> None:
    before = {"collected": 5, "skipped": 0, "xfailed": 1}
    found = count_delta(before, {"collected": 4, "skipped": 1, "xfailed": 1})
    assert [(w.kind, w.detail) for w in found] == [("fewer_tests", "collected 5 → 4"), ("more_skipped", "skipped 0 → 1")]
    assert count_delta(None, {"collected": 0}) == []  # no base measure: nothing to compare


def test_test_and_settings_files_are_known_by_each_ecosystems_names() -> None:
    assert is_test_file("pkg/foo_test.go") and is_test_file("web/a.spec.ts") and is_test_file("tests/helpers.py")
    assert not is_test_file("src/testing.py")
    assert is_settings_file("web/vitest.config.ts") and is_settings_file(".github/workflows/x.yml")
    assert not is_settings_file("src/config.py")
