"""bench/seeded.py: a file of seeded bugs that cannot be applied is refused in one line naming the
entry and the fix, before any copy is made; a bug not yet judged is reported as not run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
SEAL = "core/executor/seal.py"


def _seeded(tmp_path: Path, bugs: object) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "bugs.yaml"
    path.write_text(bugs if isinstance(bugs, str) else yaml.safe_dump(bugs))
    return subprocess.run([sys.executable, str(ROOT / "bench" / "seeded.py"), str(path), "--report"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def _bug(**kw: str) -> dict[str, str]:
    return {"id": "SE9", "target": "seal", "file": SEAL, "find": "def ", "replace": "def ", "why": "w", **kw}


def _once() -> str:
    text = (ROOT / SEAL).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("def ") and text.count(ln) == 1)
    return line


@pytest.mark.parametrize(("bugs", "said"), [
    ("{a: 1}", "want a YAML list of bugs (id, target, file, find, replace, why)"),
    ("- [unclosed", "bugs.yaml: line 1: cannot read it as YAML: expected"),
    ([{"id": "SE9", "target": "seal"}], "entry 1: id, target, file, find and replace must each be a string"),
    ([_bug(target="sealz")], "entry 1 (SE9): no target 'sealz'; one of seal, "),
    ([_bug(file="core/executor/nope.py")], "entry 1 (SE9): no file core/executor/nope.py under "),
    ([_bug(find="this text is in no file at all")], "`find` occurs 0 times in core/executor/seal.py; it must occur once"),
])
def test_a_bug_that_cannot_be_applied_is_refused_in_one_line_naming_its_entry(tmp_path: Path, bugs: object,
                                                                              said: str) -> None:
    r = _seeded(tmp_path, bugs)
    assert r.returncode != 0 and said in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / ".seeded").exists()


def test_two_bugs_with_one_id_are_refused_and_a_bug_never_judged_is_reported_as_not_run(tmp_path: Path) -> None:
    once = _once()
    r = _seeded(tmp_path, [_bug(find=once), _bug(find=once)])
    assert r.returncode != 0 and "entry 2: id SE9 is used twice" in r.stderr, r.stderr
    r = _seeded(tmp_path, [_bug(id="ZZ-never-judged", find=once)])
    assert r.returncode == 0, r.stderr
    assert "not run ZZ-never-judged" in r.stdout, r.stdout
