"""What a commit weakened against its base: real commits in a real repository."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

import pytest
from pilothouse.core.git.weakening import _TEST_NAMES, count_delta, find, is_settings_file, is_test_file
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


# one name per convention of _TEST_NAMES, outside any test folder, then the folders themselves
TEST_FILES = ["pkg/test_calc.py", "pkg/calc_test.py", "web/calc.test.js", "web/calc.test.ts", "web/calc.test.jsx",
              "web/calc.test.tsx", "web/calc.test.mjs", "web/calc.spec.js", "web/calc.spec.ts", "web/calc.spec.jsx",
              "web/calc.spec.tsx", "pkg/calc_test.go", "test/calc.py", "__tests__/calc.js", "spec/calc.ts",
              "tests/calc.rs", "pkg/tests/calc.go"]


def test_every_test_name_convention_has_a_file_below() -> None:
    names = [PurePosixPath(p).name for p in TEST_FILES]
    assert all(any(fnmatch(n, pat) for n in names) for pat in _TEST_NAMES)


@pytest.mark.parametrize("path", TEST_FILES)
def test_a_test_file_of_any_convention_deleted_is_named(repo: Path, path: str) -> None:
    assert is_test_file(path)
    commit(repo, {path: "check(add(2, 3) == 5)\n"})
    git(repo, "branch", "-f", "base")
    commit(repo, {path: None})
    assert kinds(repo) == {("test_deleted", path)}


PY = "import pytest\n\n\nclass TestAdd:\n    def test_add(self):\n        assert add(2, 3) == 5\n"
JS = "it('adds', () => {\n  expect(add(2, 3)).toBe(5)\n})\n"
GO = "func TestAdd(t *testing.T) {\n\tif add(2, 3) != 5 {\n\t\tt.Error(\"add\")\n\t}\n}\n"
RS = "#[test]\nfn adds() {\n    assert_eq!(add(2, 3), 5);\n}\n"
D, PT = "    def test_add", "        assert add"
# (file, its text at base, what the work replaces, by what): every skip and expected-failure form
SKIPS = [
    ("pkg/calc_test.py", PY, D, "    @unittest.skip('flaky')\n" + D),
    ("pkg/calc_test.py", PY, D, "    @unittest.skipIf(True, 'flaky')\n" + D),
    ("pkg/calc_test.py", PY, D, "    @skip('flaky')\n" + D),
    ("pkg/calc_test.py", PY, D, "    @pytest.mark.skip(reason='flaky')\n" + D),
    ("pkg/calc_test.py", PY, D, "    @pytest.mark.skipif(True, reason='flaky')\n" + D),
    ("pkg/calc_test.py", PY, "class", "pytestmark = pytest.mark.skip\n\n\nclass"),
    ("pkg/calc_test.py", PY, PT, "        pytest.skip('flaky')\n" + PT),
    ("pkg/calc_test.py", PY, PT, "        self.skipTest('flaky')\n" + PT),
    ("pkg/calc_test.py", PY, PT, "        raise unittest.SkipTest('flaky')\n" + PT),
    ("pkg/calc_test.py", PY, D, "    @pytest.mark.xfail\n" + D),
    ("pkg/calc_test.py", PY, D, "    @pytest.mark.xfail(strict=False, reason='known')\n" + D),
    ("pkg/calc_test.py", PY, "class", "pytestmark = pytest.mark.xfail\n\n\nclass"),
    ("pkg/calc_test.py", PY, D, "    @mark.skip\n" + D),
    ("pkg/calc_test.py", PY, D, "    @mark.xfail(raises=OverflowError)\n" + D),
    ("pkg/calc_test.py", PY, PT, "        pytest.xfail('known')\n" + PT),
    ("pkg/calc_test.py", PY, D, "    @expectedFailure\n" + D),
    ("pkg/calc_test.py", PY, D, "    @unittest.expectedFailure\n" + D),
    ("web/calc.test.js", JS, "it(", "it.skip("),
    ("web/calc.test.js", JS, "it(", "test.skip("),
    ("web/calc.test.js", JS, "it(", "it.skipIf(process.env.CI)("),
    ("web/calc.test.js", JS, "it(", "describe.skip("),
    ("web/calc.test.js", JS, "it(", "xit("),
    ("web/calc.test.js", JS, "it(", "xtest("),
    ("web/calc.test.js", JS, "it(", "xdescribe("),
    ("web/calc.test.js", JS, "it(", "it.fails("),
    ("web/calc.test.js", JS, "it(", "test.failing("),
    ("web/calc.test.js", JS, JS, "it.todo('adds')\n"),
    ("web/calc.test.js", JS, JS, "test.todo('adds')\n"),
    ("pkg/calc_test.go", GO, "{\n\tif", "{\n\tt.Skip(\"flaky\")\n\tif"),
    ("pkg/calc_test.go", GO, "{\n\tif", "{\n\tt.Skipf(\"flaky on %s\", runtime.GOOS)\n\tif"),
    ("pkg/calc_test.go", GO, "{\n\tif", "{\n\tt.SkipNow()\n\tif"),
    ("tests/calc.rs", RS, "#[test]", "#[test]\n#[ignore]"),
    ("tests/calc.rs", RS, "#[test]", "#[test]\n#[ignore = \"slow\"]"),
]


def _added(base: str, old: str, new: str) -> str:
    return next(ln.strip() for ln in base.replace(old, new, 1).splitlines() if ln not in base.splitlines())


@pytest.mark.parametrize(("path", "base", "old", "new"), SKIPS,
                         ids=[f"{i}:{_added(b, o, n)[:40]}" for i, (_p, b, o, n) in enumerate(SKIPS)])
def test_every_skip_and_expected_failure_form_added_is_named(repo: Path, path: str, base: str, old: str,
                                                              new: str) -> None:
    commit(repo, {path: base})
    git(repo, "branch", "-f", "base")
    assert old in base
    commit(repo, {path: base.replace(old, new, 1)})
    assert ("skip_added", path) in kinds(repo)
