"""What a gate measured: test outcome counts read from the runner's own output.

Machine-readable forms first — a JUnit XML report (pytest, jest-junit, vitest's junit reporter,
go-junit-report), `go test -json` event lines, cargo's per-binary `test result:` lines, `go test -v`'s
`--- PASS:` lines, a TAP stream (tape, node --test, tap) — then the summary line pytest, unittest,
jest, vitest or mocha prints. Every input is written by code the worker controls
(the gate runs its tests), so parsing is bounded in size and never raises: what can't be read
gives None, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

# a report larger than this is not parsed (a worker's test could write one to exhaust memory)
MAX_REPORT_BYTES = 32 << 20
COUNTS_OFF = ("no test counts could be read from the gate's output: the weakened-test checks on counts "
              "(fewer tests, more skipped) are off for it; the checks on the changed files still run")
FIELDS = ("collected", "passed", "failed", "skipped", "xfailed", "errors")


@dataclass
class TestCounts:
    collected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    errors: int = 0
    source: str = ""  # which form they were read from: junit, go-json, go-v, cargo, tap, pytest, unittest, jest, vitest, mocha

    __test__ = False  # not a pytest test class, whatever its name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: TestCounts) -> None:
        for f in FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))


def parse_junit(data: bytes) -> TestCounts | None:
    """Counts from a JUnit XML report: one <testcase> each, its child tells the outcome."""
    if not data.strip() or len(data) > MAX_REPORT_BYTES or b"<!ENTITY" in data or b"<!DOCTYPE" in data:
        return None  # no DTDs: entity expansion is the one way a small XML file gets large
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    c = TestCounts(source="junit")
    for case in root.iter("testcase"):
        c.collected += 1
        tags = {child.tag for child in case}
        skipped = case.find("skipped")
        if "error" in tags:
            c.errors += 1
        elif "failure" in tags:
            c.failed += 1
        elif skipped is not None:
            # pytest writes an expected failure as a skip of type pytest.xfail
            if "xfail" in (skipped.get("type") or "") or "xfail" in (skipped.get("message") or "").lower():
                c.xfailed += 1
            else:
                c.skipped += 1
        else:
            c.passed += 1
    if c.collected == 0 and root.find(".//testsuite") is None and root.tag != "testsuite":
        return None
    return c


def parse_go_json(text: str) -> TestCounts | None:
    """Counts from `go test -json`: the last pass/fail/skip action of each named test."""
    outcome: dict[tuple[str, str], str] = {}
    seen = False
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or "Action" not in ev:
            continue
        seen = True
        test, action = ev.get("Test"), ev.get("Action")
        if isinstance(test, str) and action in ("pass", "fail", "skip"):
            outcome[(str(ev.get("Package", "")), test)] = str(action)
    if not seen:
        return None
    c = TestCounts(source="go-json")
    for action in outcome.values():
        c.collected += 1
        if action == "pass":
            c.passed += 1
        elif action == "fail":
            c.failed += 1
        else:
            c.skipped += 1
    return c


_CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;", re.MULTILINE)


def parse_cargo(text: str) -> TestCounts | None:
    """Counts from `cargo test`: one `test result:` line per test binary (lib, each test file, doctests)."""
    found = _CARGO.findall(text)
    if not found:
        return None
    c = TestCounts(source="cargo")
    for passed, failed, ignored in found:
        c.add(TestCounts(passed=int(passed), failed=int(failed), skipped=int(ignored)))
    c.collected = c.passed + c.failed + c.skipped
    return c


_GO_V = re.compile(r"^\s*--- (PASS|FAIL|SKIP): \S+", re.MULTILINE)


def parse_go_verbose(text: str) -> TestCounts | None:
    """Counts from `go test -v`: one `--- PASS/FAIL/SKIP: Name` line per test and subtest."""
    found = _GO_V.findall(text)
    if not found:
        return None
    c = TestCounts(source="go-v", collected=len(found))
    c.passed, c.failed, c.skipped = found.count("PASS"), found.count("FAIL"), found.count("SKIP")
    return c


# tape / node --test (TAP) trailer: "# tests 12", "# pass 11", "# fail 1" (node: also skipped,
# todo, cancelled; its spec reporter writes "ℹ tests 12")
_TAP_TOTAL = re.compile(r"^(?:#|ℹ)\s*(tests|pass|fail|skip|skipped|todo|cancelled)\s+(\d+)\s*$", re.MULTILINE)
_TAP_LINE = re.compile(r"^\s*(not ok|ok)\b(?: \d+)?[^#\n]*(?:#\s*(SKIP|TODO)\b)?", re.MULTILINE | re.IGNORECASE)


def parse_tap(text: str) -> TestCounts | None:
    """Counts from a TAP stream: the runner's trailer when it wrote one, else its `ok`/`not ok` lines."""
    text = _ANSI.sub("", text)
    totals: dict[str, int] = {}
    for key, n in _TAP_TOTAL.findall(text):
        if key == "tests" and totals:
            totals = {}  # a later run's trailer: the last one is the gate's
        totals[key] = int(n)
    if "tests" in totals and ("pass" in totals or "fail" in totals):
        c = TestCounts(source="tap", collected=totals["tests"], passed=totals.get("pass", 0),
                       failed=totals.get("fail", 0) + totals.get("cancelled", 0),
                       skipped=totals.get("skip", 0) + totals.get("skipped", 0) + totals.get("todo", 0))
        if c.passed + c.failed + c.skipped > c.collected:
            c.passed = max(0, c.collected - c.failed - c.skipped)  # tape counts a skip as a pass too
        return c
    if not re.search(r"^(TAP version \d+|1\.\.\d+)\s*$", text, re.MULTILINE):
        return None
    c = TestCounts(source="tap")
    for verdict, directive in _TAP_LINE.findall(text):
        c.collected += 1
        if directive:
            c.skipped += 1
        elif verdict.lower() == "ok":
            c.passed += 1
        else:
            c.failed += 1
    return c if c.collected else None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# pytest: "=== 2 failed, 3 passed, 1 skipped, 1 xfailed, 1 error in 0.12s ===" (or -q: no rules)
_PYTEST_LINE = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s", re.MULTILINE)
_PYTEST_ITEM = re.compile(r"(\d+) (\w+)")
# jest: "Tests:       1 failed, 1 skipped, 3 passed, 5 total"
_JEST_LINE = re.compile(r"^Tests:\s+(.*\d+ total)\s*$", re.MULTILINE)
# vitest: "      Tests  1 failed | 3 passed | 1 skipped (5)"
_VITEST_LINE = re.compile(r"^\s*Tests\s+(.*?)\s*\((\d+)\)\s*$", re.MULTILINE)


# mocha: "  3 passing (12ms)", "  1 pending", "  2 failing"
_MOCHA = re.compile(r"^\s+(\d+) passing \(.*\)\s*$((?:\n\s+\d+ (?:pending|failing)\s*$)*)", re.MULTILINE)
# unittest: "Ran 5 tests in 0.001s" then "OK (skipped=1)" or "FAILED (failures=1, errors=1, expected failures=1)"
_UNITTEST = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n(OK|FAILED)(?: \(([^)]*)\))?", re.MULTILINE)


def parse_summary(text: str) -> TestCounts | None:
    """Counts from the last summary line pytest, unittest, mocha, jest or vitest printed."""
    text = _ANSI.sub("", text)
    best: tuple[int, TestCounts] | None = None
    for m in _UNITTEST.finditer(text):
        c = TestCounts(source="unittest", collected=int(m.group(1)))
        for key, n in re.findall(r"([\w ]+)=(\d+)", m.group(3) or ""):
            field = {"failures": "failed", "errors": "errors", "skipped": "skipped",
                     "expected failures": "xfailed"}.get(key.strip())
            if field:
                setattr(c, field, int(n))
        # unexpected successes pass too: the rest of those run
        c.passed = c.collected - c.failed - c.errors - c.skipped - c.xfailed
        best = (m.start(), c)
    for m in _PYTEST_LINE.finditer(text):
        c = TestCounts(source="pytest")
        for n, word in _PYTEST_ITEM.findall(m.group(1)):
            key = {"passed": "passed", "failed": "failed", "skipped": "skipped", "xfailed": "xfailed",
                   "xpassed": "passed", "error": "errors", "errors": "errors", "deselected": ""}.get(word)
            if key:
                setattr(c, key, getattr(c, key) + int(n))
        c.collected = c.passed + c.failed + c.skipped + c.xfailed + c.errors
        best = (m.start(), c)
    for m in _MOCHA.finditer(text):
        c = TestCounts(source="mocha", passed=int(m.group(1)))
        for n, word in _PYTEST_ITEM.findall(m.group(2) or ""):
            setattr(c, "failed" if word == "failing" else "skipped", int(n))
        c.collected = c.passed + c.failed + c.skipped
        if best is None or m.start() > best[0]:
            best = (m.start(), c)
    for m in _JEST_LINE.finditer(text):
        c = TestCounts(source="jest")
        for n, word in _PYTEST_ITEM.findall(m.group(1)):
            key = {"passed": "passed", "failed": "failed", "skipped": "skipped", "todo": "skipped",
                   "total": "collected"}.get(word)
            if key:
                setattr(c, key, getattr(c, key) + int(n))
        if best is None or m.start() > best[0]:
            best = (m.start(), c)
    for m in _VITEST_LINE.finditer(text):
        c = TestCounts(source="vitest", collected=int(m.group(2)))
        for n, word in _PYTEST_ITEM.findall(m.group(1)):
            key = {"passed": "passed", "failed": "failed", "skipped": "skipped", "todo": "skipped"}.get(word)
            if key:
                setattr(c, key, getattr(c, key) + int(n))
        if best is None or m.start() > best[0]:
            best = (m.start(), c)
    return best[1] if best else None


def counts_of(output: str, junit: bytes | None = None) -> TestCounts | None:
    """The gate's counts: a JUnit report when there is one, else the runner's output."""
    if junit:
        found = parse_junit(junit)
        if found is not None:
            return found
    for parse in (parse_go_json, parse_cargo, parse_go_verbose, parse_tap, parse_summary):
        found = parse(output)
        if found is not None:
            return found
    return None


def gate_record(gate: dict[str, Any]) -> dict[str, Any]:
    """What every gate.finished event keeps of a run (GateResult.to_dict()), fast or full, worktree
    or integration: its command, exit code, duration, counts and toolchain; `counts_off` when it
    passed with no counts read (said, not silently skipped)."""
    out = {k: gate.get(k) for k in ("command", "exit_code", "duration_s", "counts", "holdout", "toolchain")}
    if gate.get("passed") and not gate.get("counts"):
        out["counts_off"] = COUNTS_OFF
    return out


# what every view of a gate's counts says (the report, the event lines of `live`/replay/the cockpit, the
# gate log, `init`'s proof): passed, failed and skipped always, a 0 too, so a skipped test is never
# hidden and "no skips" is never read as "skips not counted"; xfailed and errors when there are any
ALWAYS = ("passed", "failed", "skipped")
IF_ANY = ("xfailed", "errors")


def _count(counts: dict[str, Any], key: str) -> int | str:
    value = counts.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else "?"  # a log is any JSON


def counts_parts(counts: dict[str, Any]) -> list[str]:
    """`['3 passed', '0 failed', '1 skipped', '1 errors']`: ALWAYS, then IF_ANY that are not 0."""
    return [f"{_count(counts, k)} {k}" for k in ALWAYS] + [
        f"{_count(counts, k)} {k}" for k in IF_ANY if _count(counts, k) not in (0, "?")]


def counts_text(counts: dict[str, Any], sep: str = ", ") -> str:
    """`5 tests: 3 passed, 0 failed, 1 skipped, 1 errors` (`sep` between the parts)."""
    return f"{_count(counts, 'collected')} tests: " + sep.join(counts_parts(counts))
