"""A round of hand-seeded bugs in the safety code: how many does the suite catch?

    python bench/seeded.py BUGS.yaml                 # every bug, two at a time
    python bench/seeded.py BUGS.yaml --only SE1 LK3  # some of them again
    python bench/seeded.py BUGS.yaml --report        # the last figures, without running
    python bench/seeded.py BUGS.yaml --suite MO4     # a miss, judged by the whole suite

Mutation testing (bench/mutation.py) makes its mutants by rule; a seeded bug is the kind a person
writes: a dropped check, a weakened pattern, an error swallowed. Someone who has not read the tests
writes them into a file, a YAML list of

    - id: LK3                       # unique
      target: leaks                 # a name from bench/mutation.py --list: its tests judge the bug
      file: core/git/leaks.py       # from the repo root
      find: "text that occurs once in the file"
      replace: "the buggy text"
      why: the promise it breaks    # one line

Each bug runs in a copy of the tree installed the way the product runs (the venv and editable
install of bench/mutation.py, so the `python -I` children import the bug too), one bug at a time
per copy, `--jobs` copies side by side. A target's tests first run clean in the copy (quickest
first, as bench/mutation.py orders them; a target whose tests fail clean judges nothing), then
with the bug, `-x`: the first failing test is the catch. A bug whose tests pass is a miss; one
whose run passes `--timeout` is a hang, counted apart (on a loaded machine it says nothing). The
figures are kept in .seeded/ROUND.json (ROUND: the bugs file's name), so a run resumes: a bug already judged with the same
text is not run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation  # noqa: E402  (bench/ is not a package: its sibling, by path)

ROOT = mutation.ROOT
WORK = ROOT / ".seeded"  # under the repo, not /tmp: a sandboxed worker has a private /tmp
# one file of verdicts per round (bench/seeded_round3.yaml -> .seeded/seeded_round3.json): rounds
# reuse ids, and a verdict is keyed by id
RESULTS = WORK / "results.json"  # main() names it for its round


@dataclass(frozen=True)
class Bug:
    id: str
    target: str
    file: str
    find: str
    replace: str
    why: str

    @property
    def digest(self) -> str:
        return hashlib.sha256("\0".join((self.target, self.file, self.find, self.replace)).encode()).hexdigest()[:16]


def load(path: Path) -> list[Bug]:
    """The bugs of `path`; SystemExit with the entry and the fix when one cannot be applied."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise SystemExit(f"{path}: cannot read it: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SystemExit(f"{path}:{where}: cannot read it as YAML: {problem}; fix that line") from None
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: want a YAML list of bugs (id, target, file, find, replace, why)")
    bugs: list[Bug] = []
    for n, entry in enumerate(raw, 1):
        where = f"{path}: entry {n}"
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("id", "target", "file", "find", "replace")):
            raise SystemExit(f"{where}: id, target, file, find and replace must each be a string")
        bug = Bug(entry["id"], entry["target"], entry["file"], entry["find"], entry["replace"], str(entry.get("why", "")))
        if bug.target not in mutation.TARGETS:
            raise SystemExit(f"{where} ({bug.id}): no target {bug.target!r}; one of {', '.join(mutation.TARGETS)}")
        source = ROOT / bug.file
        if not source.is_file():
            raise SystemExit(f"{where} ({bug.id}): no file {bug.file} under {ROOT}")
        count = source.read_text().count(bug.find)
        if count != 1:
            raise SystemExit(f"{where} ({bug.id}): `find` occurs {count} times in {bug.file}; it must occur once")
        if any(b.id == bug.id for b in bugs):
            raise SystemExit(f"{where}: id {bug.id} is used twice")
        bugs.append(bug)
    return bugs


def _saved() -> dict[str, dict[str, str]]:
    try:
        return json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        return {}


_lock = threading.Lock()


def _save(bug: Bug, verdict: str, detail: str, took: float) -> None:
    with _lock:
        saved = _saved()
        saved[bug.id] = {"digest": bug.digest, "verdict": verdict, "detail": detail, "took": f"{took:.0f}",
                         "target": bug.target, "why": bug.why}
        WORK.mkdir(exist_ok=True)
        tmp = RESULTS.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, indent=1, sort_keys=True))
        os.replace(tmp, RESULTS)


_ORDER: dict[str, tuple[str, ...] | None] = {}  # a target's tests quickest first, once they passed clean
_ORDER_LOCKS: dict[str, threading.Lock] = {}


class Slot:
    """One installed copy of the tree (the copies are alike: a target's clean run in one orders its
    tests for all)."""

    def __init__(self, n: int) -> None:
        self.tree = WORK / f"copy{n}" / "tree"
        mutation._copy_tree(self.tree)
        venv = WORK / f"copy{n}" / "venv"
        self.python = mutation._install(venv, self.tree)
        self.env = mutation._env(venv)

    def _pytest(self, tests: tuple[str, ...], timeout: float, extra: tuple[str, ...] = ()) -> tuple[int | None, str]:
        argv = ["nice", "-n", str(mutation.NICENESS[0]), str(self.python), "-m", "pytest", "-q", "-x",
                "-p", "no:cacheprovider", *extra, *tests]
        # a session of its own, so a hang's whole tree (a supervisor, a bwrap) is stopped with it
        proc = subprocess.Popen(argv, cwd=self.tree, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, stdin=subprocess.DEVNULL)
        try:
            out, _ = proc.communicate(timeout=timeout)
            return proc.returncode, out
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            return None, out

    def clean_order(self, target: str, timeout: float) -> tuple[str, ...] | None:
        """The target's tests quickest first, once they pass clean; None when they do not."""
        with _lock:
            target_lock = _ORDER_LOCKS.setdefault(target, threading.Lock())
        with target_lock:
            if target in _ORDER:
                return _ORDER[target]
            tests = mutation.TARGETS[target].tests
            rc, out = self._pytest(tests, timeout, ("-p", "no:xdist", "--durations=0", "--durations-min=0"))
            if rc != 0:
                print(f"{target}: its tests do not pass clean in {self.tree} (rc {rc}); its bugs are not judged:\n"
                      f"{out[-1500:]}", flush=True)
            _ORDER[target] = mutation.fastest_first(out, tests) if rc == 0 else None
            return _ORDER[target]

    def judge(self, bug: Bug, timeout: float, suite: bool) -> tuple[str, str]:
        """(verdict, detail): caught (the test), missed, hung, or unjudged."""
        path = self.tree / bug.file
        clean = (ROOT / bug.file).read_text()
        order = ("tests",) if suite else self.clean_order(bug.target, timeout)
        if order is None:
            return "unjudged", "the target's tests fail clean"
        path.write_text(clean.replace(bug.find, bug.replace, 1))
        try:
            extra = ("-n", "2") if suite else ("-p", "no:xdist")
            rc, out = self._pytest(order, timeout, extra)
        finally:
            path.write_text(clean)
        if rc is None:
            return "hung", f"still running after {timeout:.0f} s"
        if rc == 0:
            return "missed", ""
        if rc == 5:
            return "unjudged", "no test ran"
        return "caught", mutation.killed_by(out)


def run(bugs: list[Bug], jobs: int, timeout: float, suite: bool, again: bool = False) -> None:
    """Judge `bugs`: those without a verdict for their text yet, or every one when `again` (--only:
    the tests changed since)."""
    saved = _saved()
    todo: queue.Queue[Bug] = queue.Queue()
    for bug in bugs:
        done = saved.get(bug.id)
        if suite or again or done is None or done["digest"] != bug.digest or done["verdict"] in ("hung", "unjudged"):
            todo.put(bug)
    total = todo.qsize()
    print(f"{total} bugs to judge, {jobs} at a time", flush=True)

    def work(n: int) -> None:
        slot = Slot(n)
        while True:
            try:
                bug = todo.get_nowait()
            except queue.Empty:
                return
            t0 = time.monotonic()
            verdict, detail = slot.judge(bug, timeout, suite)
            took = time.monotonic() - t0
            if suite and verdict == "missed":
                detail = "the whole suite passes"
            _save(bug, verdict, (detail + " (whole suite)") if suite and verdict == "caught" else detail, took)
            print(f"{bug.id:6} {verdict:8} {took:5.0f} s  {detail}", flush=True)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(min(jobs, max(total, 1)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def report(bugs: list[Bug]) -> int:
    saved = _saved()
    rows = [(b, saved.get(b.id)) for b in bugs]
    judged = [(b, r) for b, r in rows if r is not None and r["digest"] == b.digest and r["verdict"] in ("caught", "missed")]
    by_target: dict[str, list[int]] = {}
    for b, r in judged:
        tally = by_target.setdefault(b.target, [0, 0])
        tally[0 if r["verdict"] == "caught" else 1] += 1
    print(f"{'target':12} caught / judged")
    for target, (caught, missed) in sorted(by_target.items()):
        print(f"{target:12} {caught:3} / {caught + missed}")
    caught = sum(t[0] for t in by_target.values())
    print(f"{'all':12} {caught:3} / {len(judged)}" + (f"  = {100 * caught / len(judged):.1f} %" if judged else ""))
    for b, r in judged:
        if r["verdict"] == "missed":
            print(f"missed {b.id} ({b.file}): {b.why}")
    for b, r in rows:
        if r is None or r["digest"] != b.digest:
            print(f"not run {b.id}")
        elif r["verdict"] not in ("caught", "missed"):
            print(f"{r['verdict']} {b.id}: {r['detail']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bugs", type=Path, help="the YAML list of seeded bugs")
    ap.add_argument("--only", nargs="+", metavar="ID", help="judge these bugs (again), not all")
    ap.add_argument("--jobs", type=int, default=2, help="copies judging side by side (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1200.0,
                    help="seconds one bug's test run may take before it counts as hung (default: %(default)s)")
    ap.add_argument("--nice", type=int, default=10, help="the niceness the runs get (default: %(default)s)")
    ap.add_argument("--suite", nargs="+", metavar="ID", help="judge these bugs by the whole suite (-n 2), not their target's tests")
    ap.add_argument("--report", action="store_true", help="print the last figures, without running")
    args = ap.parse_args(argv)
    global RESULTS
    bugs = load(args.bugs)
    RESULTS = WORK / f"{args.bugs.stem}.json"
    mutation.NICENESS[0] = args.nice
    if not args.report:
        wanted = set(args.suite or args.only or [b.id for b in bugs])
        unknown = wanted - {b.id for b in bugs}
        if unknown:
            raise SystemExit(f"{args.bugs}: no bug {', '.join(sorted(unknown))}")
        run([b for b in bugs if b.id in wanted], 1 if args.suite else args.jobs, args.timeout, bool(args.suite),
            again=bool(args.only))
    return report(bugs)


if __name__ == "__main__":
    if shutil.which("nice") is None:
        raise SystemExit("bench/seeded.py needs `nice` on PATH")
    raise SystemExit(main())
