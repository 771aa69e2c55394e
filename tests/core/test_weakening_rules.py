"""The rules behind the weakened-test verdict: what a declaration exempts, how lines and counts are read, what is said.

Real commits in a real repository (core/git/weakening.py), and the holdout folder copied into a real
worktree (core/git/holdout.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core.git.gates import GateResult
from pilothouse.core.git.holdout import run_holdout
from pilothouse.core.git.weakening import count_delta, find, summary
from pilothouse.core.records.project import ProjectConfig
from support import git
from test_weakening import commit


def as_base(repo: Path, files: dict[str, str | None]) -> None:
    commit(repo, files)
    git(repo, "branch", "-f", "base")


def kinds(repo: Path, **kw: object) -> set[tuple[str, str]]:
    return {(w.kind, w.path) for w in find(str(repo), "base", **kw)}  # type: ignore[arg-type]


T = "def test_it():\n    assert 1 + 1 == 2\n"

# (what expected_paths.write declares, a file it covers, a file beside it that it does not)
DECLARED = [
    ("tests/test_a.py", "tests/test_a.py", "tests/test_b.py"),
    ("tests/unit/", "tests/unit/test_a.py", "tests/unit_extra/test_a.py"),
    ("tests/unit", "tests/unit/test_a.py", "tests/unit_extra/test_a.py"),
    ("tests/unit/test_*.py", "tests/unit/test_a.py", "tests/test_a.py"),
    # a literal path that also reads as a glob: Next.js' [slug] folders, pytest-style ids in names
    ("web/app/[slug]/page.test.tsx", "web/app/[slug]/page.test.tsx", "web/app/slug/page.test.tsx"),
    ("tests/test_cases[1].py", "tests/test_cases[1].py", "tests/test_cases2.py"),
]


@pytest.mark.parametrize(("declared", "covered", "beside"), DECLARED)
def test_a_declaration_exempts_what_it_names_and_nothing_beside_it(git_repo: Path, declared: str, covered: str,
                                                                   beside: str) -> None:
    as_base(git_repo, {covered: T, beside: T})
    commit(git_repo, {covered: None, beside: None})
    assert kinds(git_repo, declared=[declared], reason="the plan moves these tests") == {("test_deleted", beside)}
    assert kinds(git_repo, declared=[declared, beside], reason="the plan moves these tests") == set()


def test_a_test_renamed_away_is_a_deleted_test_and_every_change_after_it_is_still_read(git_repo: Path) -> None:
    # git diff detects renames by default (diff.renames): a rename is a record of three fields, and
    # read as pairs it would shift every later path onto the wrong status
    as_base(git_repo, {"tests/test_calc.py": T + "# the calc tests\n", "tests/test_slug.py": T, "tests/test_zz.py": T})
    commit(git_repo, {"tests/test_calc.py": None, "notes/calc_notes.txt": T + "# the calc tests\n",
                      "tests/test_slug.py": "def test_it():\n    pass\n", "tests/test_zz.py": None})
    assert kinds(git_repo) == {("test_deleted", "tests/test_calc.py"), ("assertions_removed", "tests/test_slug.py"),
                               ("test_deleted", "tests/test_zz.py")}


# (file, its text at base, its text after): the one line that weakens it is removed, and it starts
# the line or follows a single indent character
FIRST_COLUMN = [
    ("pkg/calc_test.go", "func TestAdd(t *testing.T) {\n\tassert.Equal(t, 5, add(2, 3))\n}\n",
     "func TestAdd(t *testing.T) {\n}\n", "assertions_removed"),
    ("tests/test_calc.py", "def test_add():\n\tassert add(2, 3) == 5\n", "def test_add():\n\tpass\n",
     "assertions_removed"),
    ("tests/check_calc.py", "from calc import add\n\nassert add(2, 3) == 5\n", "from calc import add\n",
     "assertions_removed"),
    ("pyproject.toml", "[tool.coverage.report]\nfail_under = 90\nshow_missing = true\n",
     "[tool.coverage.report]\nshow_missing = true\n", "settings_changed"),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = \"--strict-markers\"\nxfail_strict = true\n",
     "[tool.pytest.ini_options]\nxfail_strict = true\n", "settings_changed"),
]


@pytest.mark.parametrize(("path", "before", "after", "kind"), FIRST_COLUMN,
                         ids=[f"{p}:{k}:{i}" for i, (p, _b, _a, k) in enumerate(FIRST_COLUMN)])
def test_a_removed_line_is_read_from_its_first_character(git_repo: Path, path: str, before: str, after: str,
                                                         kind: str) -> None:
    as_base(git_repo, {path: before})
    commit(git_repo, {path: after})
    assert kinds(git_repo) == {(kind, path)}


BASE3 = ("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(0, 0) == 0\n"
         "    assert add(-1, 1) == 0\n")
# (the test file after the work, what is said of it): assertions rewritten, moved, split or dropped
REWRITES = [
    (BASE3.replace("add(2, 3) == 5", "add(3, 2) == 5"), None),
    (BASE3.replace("    assert add(2, 3) == 5\n", "") + "    assert add(2, 3) == 5\n", None),
    (BASE3.replace("    assert add(2, 3) == 5\n", "    assert add(2, 3) > 4\n    assert add(2, 3) < 6\n"), None),
    (BASE3.replace("    assert add(0, 0) == 0\n", ""), "1 assertion line(s) fewer"),
    (BASE3.replace("add(2, 3) == 5", "add(3, 2) == 5").replace("    assert add(0, 0) == 0\n", ""),
     "1 assertion line(s) fewer"),
    (BASE3.replace("add(2, 3) == 5", "add(3, 2) == 5").replace("    assert add(0, 0) == 0\n", "")
     .replace("    assert add(-1, 1) == 0\n", ""), "2 assertion line(s) fewer"),
    (BASE3.replace("    assert add(0, 0) == 0\n", "").replace("    assert add(-1, 1) == 0\n", ""),
     "2 assertion line(s) fewer"),
]


@pytest.mark.parametrize(("after", "said"), REWRITES)
def test_assertions_lost_are_the_removed_ones_less_the_added_ones(git_repo: Path, after: str,
                                                                   said: str | None) -> None:
    as_base(git_repo, {"tests/test_add.py": BASE3})
    commit(git_repo, {"tests/test_add.py": after})
    found = [(w.kind, w.path, w.detail) for w in find(str(git_repo), "base")]
    assert found == ([("assertions_removed", "tests/test_add.py", said)] if said else [])


FULL = {"collected": 5, "passed": 4, "failed": 0, "skipped": 1, "xfailed": 0, "errors": 0}


@pytest.mark.parametrize("key", ["collected", "passed", "skipped", "xfailed"])
def test_the_same_counts_on_both_sides_are_no_fall(key: str) -> None:
    assert count_delta(dict(FULL), dict(FULL)) == []
    same = {**FULL, key: 0}
    assert count_delta(same, dict(same)) == []


# (the base's counts, the work's, what is said): a count one side does not report reads as 0
MISSING = [
    ({"collected": 0, "passed": 0}, {"passed": 0}, []),
    ({"passed": 0}, {"collected": 0, "passed": 0}, []),
    ({"collected": 3}, {"collected": 3, "skipped": 0}, []),
    ({"collected": 3}, {"collected": 3, "xfailed": 0}, []),
    ({"collected": 3}, {"collected": 3, "skipped": 2}, [("more_skipped", "skipped 0 → 2")]),
    ({"collected": 3}, {"collected": 3, "xfailed": 1}, [("more_skipped", "xfailed 0 → 1")]),
    ({"collected": 3, "skipped": 1}, {"collected": 3}, []),
    # work whose collection broke reports no count at all: every test the base had is gone
    ({"collected": 3, "passed": 3}, {"passed": 0}, [("fewer_tests", "collected 3 → 0")]),
]


@pytest.mark.parametrize(("before", "after", "said"), MISSING)
def test_a_count_a_side_does_not_report_reads_as_zero(before: dict, after: dict, said: list) -> None:
    assert [(w.kind, w.detail) for w in count_delta(before, after)] == said


@pytest.mark.parametrize("n", [1, 3, 4, 5, 6, 9])
def test_the_problem_line_names_four_weakenings_and_counts_the_rest(git_repo: Path, n: int) -> None:
    names = [f"tests/test_{i}.py" for i in range(n)]
    as_base(git_repo, dict.fromkeys(names, T))
    commit(git_repo, dict.fromkeys(names))
    line = summary(find(str(git_repo), "base"))
    named = "; ".join(f"test deleted ({p}: deleted)" for p in names[:4])
    assert line == named + (f" and {n - 4} more" if n > 4 else "")


HIDDEN = "def test_hidden():\n    assert True\n"


@pytest.fixture
def worktree(git_repo: Path, tmp_path: Path) -> Path:
    (git_repo / "holdout").mkdir()
    (git_repo / "holdout" / "test_hidden.py").write_text(HIDDEN)
    (git_repo / ".git" / "info" / "exclude").write_text("holdout/\n")
    wt = tmp_path / "wt"
    git(git_repo, "worktree", "add", "-q", "-b", "task", str(wt))
    return wt


# (the counts the holdout run reported, what the reason says of them): one it did not report is a 0
HELD = [
    ({"failed": 1, "errors": 0, "passed": 2, "skipped": 0, "collected": 3}, "1 failed, 0 errors, 2 passed, 0 skipped of 3"),
    ({"failed": 1, "passed": 2, "collected": 3}, "1 failed, 0 errors, 2 passed, 0 skipped of 3"),
    ({"errors": 2, "collected": 2}, "0 failed, 2 errors, 0 passed, 0 skipped of 2"),
    ({"failed": 1}, "1 failed, 0 errors, 0 passed, 0 skipped of 0"),
    (None, "no counts could be read"),
]


@pytest.mark.parametrize(("counts", "said"), HELD)
def test_a_failed_holdout_run_is_told_by_its_counts_and_an_unreported_one_is_zero(worktree: Path, counts: dict | None,
                                                                                   said: str) -> None:
    project = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true", "holdout": "holdout"}})
    seen: list[str] = []

    def rerun() -> GateResult:  # what the gate's second run reports, with the holdout tests in the tree
        seen.append((worktree / "holdout" / "test_hidden.py").read_text())
        return GateResult("full", "true", False, 1, "", 0.1, counts=counts)

    res = run_holdout(project, "full", worktree, GateResult("full", "true", True, 0, "", 0.1), rerun)
    assert seen == [HIDDEN] and not (worktree / "holdout").exists()
    assert not res.passed
    assert res.reason == f"gate 'full': the holdout tests failed ({said}); their output is kept from workers"
