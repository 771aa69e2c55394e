"""Did the work make its gate easier to pass? The test changes a builder's commit makes, against its base.

A builder whose change fails the gate can turn the gate green by weakening the tests instead of
fixing the code: skipping or deleting a test, removing its assertions, relaxing the test, lint or
coverage settings. Each of those is visible in the commit; this module names them (and, given both,
the fall in the gate's counts) so the supervisor can stop the task instead of merging it. A task
whose plan declared the change (the path in expected_paths.write and a stated reason) is exempt.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Any

from pilothouse.core.git.worktrees import git

# a test file, by the conventions of pytest/unittest, jest/vitest, go and rust integration tests
_TEST_NAMES = ("test_*.py", "*_test.py", "*.test.[jt]s", "*.test.[jt]sx", "*.test.mjs", "*.spec.[jt]s",
               "*.spec.[jt]sx", "*_test.go")
_TEST_DIRS = {"tests", "test", "__tests__", "spec"}
# what decides how tests run or how strict the checks are
SETTINGS = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", ".coveragerc", "noxfile.py",
            "jest.config.*", "vitest.config.*", "karma.conf.*", ".mocharc*", ".eslintrc*", "eslint.config.*",
            ".flake8", "ruff.toml", ".ruff.toml", "mypy.ini", ".pylintrc", ".golangci.y*ml", "clippy.toml",
            ".pre-commit-config.yaml", ".gitlab-ci.yml", "codecov.y*ml", ".codecov.y*ml")
_CI_DIRS = (".github/workflows/", ".circleci/", ".buildkite/")
# files that hold test settings among much else: only a changed line that names them counts
_MIXED = {"pyproject.toml", "package.json", "Cargo.toml"}
_MIXED_KEYS = re.compile(r"pytest|addopts|testpaths|coverage|fail_under|cov-fail|ruff|mypy|pylint|flake8|"
                         r"jest|vitest|eslint|\"test\"|lint|threshold", re.IGNORECASE)
# skipped, or expected to fail (xfail, expectedFailure, jest's failing, vitest's fails): it fails no gate
_SKIP = re.compile(r"@(?:unittest\.)?(?:skip|expectedFailure)|(?:pytest\.|\bmark\.)(?:mark\.)?(?:skip|xfail)|"
                   r"\bskipTest\(|\bSkipTest\b|\b(?:it|test|describe)\.(?:skip\w*|todo|fails|failing)\(|"
                   r"\bx(?:it|test|describe)\(|t\.Skip|#\[ignore\b")
_ASSERT = re.compile(r"\bassert|\bexpect\(|\bshould\b|t\.(?:Error|Fatal|Fail)|\braises\(|assert_eq!|assert!")
# an assertion that cannot fail is no assertion: replacing one with these removes it
_TRIVIAL = re.compile(r"assert\s*\(?\s*True\b|assertTrue\(\s*True\s*\)|assertEqual\(\s*(\w+)\s*,\s*\1\s*\)|"
                      r"expect\(\s*true\s*\)\.toBe\(\s*true\s*\)|assert!\(\s*true\s*\)")


@dataclass
class Weakening:
    kind: str  # test_deleted, skip_added, assertions_removed, settings_changed, fewer_tests, more_skipped
    path: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_test_file(path: str) -> bool:
    p = PurePosixPath(path)
    return any(fnmatch(p.name, pat) for pat in _TEST_NAMES) or (
        p.suffix in (".py", ".js", ".ts", ".go", ".rs") and bool(_TEST_DIRS & set(p.parts[:-1])))


def is_settings_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatch(name, pat) for pat in SETTINGS) or path.startswith(_CI_DIRS)


def _declared(path: str, writes: list[str]) -> bool:
    return any(path == w.rstrip("/") or path.startswith(w.rstrip("/") + "/") or fnmatch(path, w) for w in writes)


def _lines(diff: str) -> tuple[list[str], list[str]]:
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:] for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    return added, removed


def find(cwd: str, base: str, *, declared: list[str] | None = None, reason: str = "",
         counts: dict[str, Any] | None = None, base_counts: dict[str, Any] | None = None,
         merge_base: str | None = None) -> list[Weakening]:
    """What HEAD weakened against `base` (their merge-base, unless the caller has it: `merge_base`):
    file changes, then the counts' fall."""
    exempt = list(declared or []) if reason.strip() else []
    since = merge_base or git(cwd, "merge-base", base, "HEAD")
    status = git(cwd, "diff", "--name-status", "--no-renames", "-z", since, "HEAD", strip=False).split("\0")
    found: list[Weakening] = []
    for st, path in zip(status[0::2], status[1::2], strict=False):
        if not path or _declared(path, exempt):
            continue
        test, settings = is_test_file(path), is_settings_file(path)
        mixed = PurePosixPath(path).name in _MIXED and "/" not in path.strip("/")
        if not (test or settings or mixed):
            continue
        if st == "D":
            found.append(Weakening("test_deleted" if test else "settings_changed", path, "deleted"))
            continue
        added, removed = _lines(git(cwd, "diff", "-U0", since, "HEAD", "--", path, strip=False))
        if settings or (mixed and any(_MIXED_KEYS.search(ln) for ln in added + removed)):
            found.append(Weakening("settings_changed", path, f"+{len(added)} -{len(removed)} lines"))
            continue
        if not test:
            continue
        skips = [ln.strip() for ln in added if _SKIP.search(ln)]
        if skips:
            found.append(Weakening("skip_added", path, skips[0][:120]))
        lost = _asserts(removed) - _asserts(added)
        if lost > 0:
            found.append(Weakening("assertions_removed", path, f"{lost} assertion line(s) fewer"))
    found.extend(count_delta(base_counts, counts))
    return found


def _asserts(lines: list[str]) -> int:
    return sum(1 for ln in lines if _ASSERT.search(ln) and not _TRIVIAL.search(ln))


def test_changes(cwd: str, base: str) -> list[str]:
    """'A tests/test_x.py'-style lines: the test and test-settings files HEAD changed since `base`."""
    since = git(cwd, "merge-base", base, "HEAD")
    status = git(cwd, "diff", "--name-status", "--no-renames", "-z", since, "HEAD", strip=False).split("\0")
    return [f"{st} {path}" for st, path in zip(status[0::2], status[1::2], strict=False)
            if path and (is_test_file(path) or is_settings_file(path))]


def count_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[Weakening]:
    """Fewer tests collected, or more skipped or xfailed, than the same gate on the base."""
    if not before or not after:
        return []
    out = []
    # a side that reports no count collected none (work whose collection broke says nothing)
    if int(after.get("collected", 0)) < int(before.get("collected", 0)):
        out.append(Weakening("fewer_tests", "", f"collected {before.get('collected', 0)} → {after.get('collected', 0)}"))
    for key in ("skipped", "xfailed"):
        if int(after.get(key, 0)) > int(before.get(key, 0)):
            out.append(Weakening("more_skipped", "", f"{key} {before.get(key, 0)} → {after.get(key, 0)}"))
    return out


def summary(found: list[Weakening]) -> str:
    """One line for the problem: what was weakened, where."""
    parts = [f"{w.kind.replace('_', ' ')} ({w.path + ': ' if w.path else ''}{w.detail})" for w in found[:4]]
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return "; ".join(parts) + more
