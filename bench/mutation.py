"""Mutation testing of the modules where a silent bug costs the most, with cosmic-ray.

    python bench/mutation.py guard budgets      # some modules
    python bench/mutation.py --all              # every module below
    python bench/mutation.py --list             # the modules and the tests that judge them
    python bench/mutation.py --report --all     # the last run's figures again (e.g. after EQUIVALENT grew)
    python bench/mutation.py --survivors budgets  # after new tests: run only the last survivors again

For each module: copy the tree (so a mutant never sits in the working tree, even if this is
killed), check the module's tests pass unmutated, then let cosmic-ray apply one mutation at a
time and run those tests (never the whole suite), under `nice -n 19` and one mutant at a time.
Prints the kill rate per module and every surviving mutant with its diff; a survivor listed in
EQUIVALENT (it changes no behaviour) is reported as such and left out of the rate. Goal: ≥ 90 %.

Why cosmic-ray: mutmut 3 copies `src/` (or the package dir) into `mutants/` and imports the
package from there, which this flat layout (the repo root *is* `pilothouse` via package-dir)
does not fit; cosmic-ray mutates the file in place and runs any test command, so the copy below
plus PYTHONPATH is all it needs. The copy lives under the repo (`.mutation/`, ignored by git),
not in /tmp: a worker under bubblewrap gets a private /tmp and must still see the package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"


@dataclass(frozen=True)
class Target:
    modules: tuple[str, ...]  # paths of the mutated files, from the repo root
    tests: tuple[str, ...]  # the test files that judge them


# smallest and most valuable first
TARGETS: dict[str, Target] = {
    "guard": Target(("providers/guard.py",), ("tests/providers/test_guard.py",)),
    "redact": Target(("providers/redact.py",), ("tests/providers/test_redact.py",)),
    "budgets": Target(("core/stops/budgets.py",), ("tests/core/test_budgets.py",)),
    "verdict": Target(("core/dispatch/verdict.py",), ("tests/core/test_verdict.py",)),
    "quota": Target(("core/stops/quota.py",), ("tests/core/test_quota.py",)),
    "contract": Target(("providers/contract.py", "providers/contract_fast.py", "providers/contract_events.py"),
                       ("tests/providers/test_contract_fast.py", "tests/core/test_verdict.py")),
    "problems": Target(("core/stops/problems.py",), ("tests/core/test_problems.py",)),
    "events": Target(("core/state/events.py",), ("tests/core/test_events.py",)),
    "git": Target(("core/git/integration.py", "core/git/worktrees.py"),
                  ("tests/core/test_integration.py", "tests/core/test_worktrees.py")),
    "confine": Target(("providers/confine/bwrap.py", "providers/confine/mounts.py",
                       "providers/confine/policy.py", "providers/confine/probe.py"),
                      ("tests/providers/test_confine.py", "tests/providers/test_probe.py",
                       "tests/providers/test_gate_sandbox_plan.py", "tests/providers/test_confine_toolroots.py")),
}

# Survivors that change no behaviour: (file, the line as the mutant writes it, why). Matched on
# the mutated line's text, so an edit elsewhere keeps them; an edit of the line itself makes the
# mutant show up again, to be judged again.
EQUIVALENT: list[tuple[str, str, str]] = [
    ("providers/redact.py", "if boundary == 0:",
     "a negative boundary emits nothing and keeps the buffer either way (cut = max(pos, boundary) = 0)"),
    ("providers/redact.py", "if boundary <= -1:",
     "at boundary 0 the loop breaks on the first match and cut is 0: nothing emitted, buffer kept"),
    ("providers/redact.py", "continue",
     "finditer yields matches in order: every match after one at or past the boundary is past it too"),
    ("providers/redact.py", "self._hold = max(redactor.max_len - 1, 1)",
     "a redactor with a secret has max_len >= MIN_SECRET_LEN, and one without never reads the hold"),
    ("providers/redact.py", "self._hold = max(redactor.max_len - 1, -1)",
     "a redactor with a secret has max_len >= MIN_SECRET_LEN, and one without never reads the hold"),
    ("providers/redact.py", "if boundary < 0:",
     "at boundary 0 the loop breaks on the first match and cut is 0: nothing emitted, buffer kept"),
    ("providers/redact.py", "self._forms = sorted(forms, key=lambda f: (~len(f), f))",
     "~n is -n - 1: the same order, longest first"),
    ("providers/redact.py", "self.max_len = max((len(f) for f in self._forms), default= 1)",
     "only read by StreamRedactor, for a redactor with secrets (no default then); without, the hold is unused"),
    ("providers/redact.py", "self.max_len = max((len(f) for f in self._forms), default= -1)",
     "only read by StreamRedactor, for a redactor with secrets (no default then); without, the hold is unused"),
    ("core/dispatch/verdict.py", 'elif kind >= "usage":',
     'event kinds are the closed set of contract_events: none left after text sorts above usage but usage'),
    ("core/dispatch/verdict.py", 'elif kind >= "tool":',
     'event kinds are the closed set of contract_events: none left after text and usage sorts above tool but tool'),
    ("core/dispatch/verdict.py", 'elif kind >= "session":',
     'event kinds are the closed set of contract_events: of those left, only session sorts at or above it'),
    ("core/dispatch/verdict.py", 'if ev.status <= "denied":',
     'tool statuses are the closed set started/ok/error/denied: only denied sorts at or below it'),
    ("core/dispatch/verdict.py", 'elif parsed.state >= "parsed" and parsed.result is not None:',
     'only the parsed state carries a result'),
    ("core/dispatch/verdict.py", 'elif parsed.state == "parsed" or parsed.result is not None:',
     'only the parsed state carries a result, and it always does'),
    ("core/dispatch/verdict.py", 'elif parsed.state is "parsed" and parsed.result is not None:',
     "the parse state is always one of the parser's own literals (the same object)"),
    ("core/dispatch/verdict.py", 'step_capped = step_cap > 0 and state.steps >= step_cap and parsed.state is not "parsed"',
     "the parse state is always one of the parser's own literals (the same object)"),
    ("core/dispatch/verdict.py", 'if text is None or state.texts:',
     'no runner carries its final text apart from its text events (Runner.final_text is None for all)'),
    ("core/dispatch/verdict.py", 'inp = float(getattr(cost_cfg, "input", 1) or 0)',
     'cost_cfg is a registry Cost, which always has the field'),
    ("core/dispatch/verdict.py", 'inp = float(getattr(cost_cfg, "input", -1) or 0)',
     'cost_cfg is a registry Cost, which always has the field'),
    ("core/dispatch/verdict.py", 'outp = float(getattr(cost_cfg, "output", 1) or 0)',
     'cost_cfg is a registry Cost, which always has the field'),
    ("core/dispatch/verdict.py", 'outp = float(getattr(cost_cfg, "output", -1) or 0)',
     'cost_cfg is a registry Cost, which always has the field'),
    ("core/dispatch/verdict.py", 'elif ev.status <= "error":',
     'tool statuses are a closed set: of started/ok/error left after denied, only error sorts at or below it'),
    ("core/dispatch/verdict.py", 'elif kind <= "error":',
     'event kinds are a closed set: of error/quota/reasoning left, only error sorts at or below it'),
    ("core/dispatch/verdict.py", 'elif kind <= "quota":',
     'event kinds are a closed set: of quota/reasoning left, only quota sorts at or below it'),
    ("core/dispatch/verdict.py", 'elif parsed.state <= "parsed" and parsed.result is not None:',
     'only the parsed state carries a result'),
    ("core/state/events.py", '_TAIL_CHUNK = 64 | 1024',
     'a smaller read-back chunk gives the same answer in more reads'),
    ("core/state/events.py", 'candidates = lines if pos <= 0 else lines[1:]',
     'pos is a file offset, never below 0'),
    ("core/state/events.py", 'if fh.tell() != 0:',
     'a file offset is never below 0'),
    ("core/state/events.py", 'if pos != 0:',
     'pos is a file offset, never below 0'),
    ("core/state/events.py", 'if st.st_size is self.offset:',
     'reading no new bytes changes nothing: the same empty answer, the same state'),
    ("core/state/events.py", 'if st.st_size <= self.offset:',
     'a size below the offset was handled just before (truncation): only == is left'),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce=0, step= 9, rust_timeout=500, yield_on_timeout=True,',
     "watchfiles' poll step in ms: when a change is seen, not what is yielded"),
    ("core/state/events.py", 'candidates = lines if pos == 0 else lines[ 2:]',
     'the read-back goes on to offset 0, where every line is scanned: the same seq, found later'),
    ("core/state/events.py", '/,',
     "append's event type becomes positional-only: every caller passes it by position"),
    ("core/state/events.py", 'if pos > 1:',
     "at offset 1 the first line lacks its opening '{' and never decodes: dropped either way"),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) > target for _, p in changes):',
     "a missed change of the log is read on the watcher's next timeout (yield_on_timeout): the same events, later"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 * 1025',
     'a larger read-back chunk gives the same answer in fewer reads'),
    ("core/state/events.py", 'if st.st_size < self.offset:',
     'a size below the offset was handled just before (truncation): never true here, and reading nothing changes nothing'),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce=0, step= 11, rust_timeout=500, yield_on_timeout=True,',
     "watchfiles' poll step in ms: when a change is seen, not what is yielded"),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce=0, step=10, rust_timeout= 499, yield_on_timeout=True,',
     "the watcher's timeout in ms: when an idle wake comes, not what is yielded"),
    ("core/state/events.py", 'if not changes and not any(os.path.abspath(p) == target for _, p in changes):',
     'then every reported change is read (an unrelated one reads nothing) and a change of the log is read either way'),
    ("core/state/events.py", '_TAIL_CHUNK = 64 ** 1024',
     'one read of the whole file gives the same answer'),
    ("core/state/events.py", 'if fh.read( 2) != b"\\n":',
     'read at one byte before the end: at most one byte comes back either way'),
    ("core/state/events.py", 'while pos != 0 and buf.count(b"\\n") <= n:',
     'pos is a file offset, never below 0'),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce= 1, step=10, rust_timeout=500, yield_on_timeout=True,',
     "watchfiles' debounce in ms: when a change is reported, not what is yielded"),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce=0, step=10, rust_timeout= 501, yield_on_timeout=True,',
     "the watcher's timeout in ms: when an idle wake comes, not what is yielded"),
    ("core/state/events.py", 'for changes in watch(path.parent, debounce=0, step=10, rust_timeout=500, yield_on_timeout=False,',
     'idle wakes are only a fallback: every change of the log is reported and read'),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) >= target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) <= target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) is target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) != target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) < target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", 'if changes and  any(os.path.abspath(p) == target for _, p in changes):',
     "the watcher still wakes on the log's own change or its timeout and reads it: the same events, at most a timeout later"),
    ("core/state/events.py", '_TAIL_CHUNK = 65 * 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 63 * 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 * 1023',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 + 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 ^ 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 << 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", '_TAIL_CHUNK = 64 % 1024',
     "the read-back chunk's size changes how many reads it takes, not what they find"),
    ("core/state/events.py", 'fh.seek( 1, os.SEEK_END)',
     'reading back from one past the end shifts the chunks by a byte; the answer does not depend on where they fall'),
    ("core/state/events.py", 'while pos != 0:',
     'pos is a file offset, never below 0'),
    ("core/state/events.py", 'def _decode(raw: bytes, events_only: bool = False) -> dict[str, Any] | None:',
     'every caller passes events_only'),
    ("core/state/events.py", 'if changes and not any(os.path.abspath(p) is not target for _, p in changes):',
     'then every reported change is read (an unrelated one reads nothing)'),
    ("core/stops/budgets.py", 'return max(int(runs or 0), int(row["tokens"]) if row is not None else -1)',
     "the runs' sum (coalesce(sum, 0) of token counts) is never below 0, so max() never picks the -1"),
    ("core/stops/budgets.py",
     "def job_tokens(layout: RepoLayout, job: str, /, conn: sqlite3.Connection | None = None) -> int:",
     "conn may then also be passed by position; every caller names it"),
    ("core/stops/budgets.py",
     'runs = db.execute("SELECT coalesce(sum(tokens), 0) FROM runs WHERE job = ?", (job,)).fetchone()[ -1]',
     "the row has one column: [-1] is [0]"),
    ("core/stops/budgets.py", 'return max(int(runs or -1), int(row["tokens"]) if row is not None else 0)',
     "runs is 0 only with no runs; max() with the job's total (>= 0) never picks the -1"),
    ("core/stops/budgets.py", "def budget_state(layout: RepoLayout, job: str, cap: int | None = None, /,",
     "layout, job and cap become positional-only: every caller passes them by position"),
    ("core/stops/budgets.py",
     "def enforce(layout: RepoLayout, job: str, cap: int | None = None, /, now: datetime | None = None,",
     "layout, job and cap become positional-only: every caller passes them by position"),
]


def _copy_tree(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the working tree, as they are now."""
    if dest.exists():
        shutil.rmtree(dest)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(".mutation/"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _env(pkgroot: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pkgroot)  # `import pilothouse` finds the copy, ahead of the editable install
    env.setdefault("PILOTHOUSE_TEST_RUNNERS", str(ROOT / ".runners"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a stale .pyc of a mutant must never be imported
    return env


def _config(name: str, target: Target, timeout: float) -> str:
    tests = " ".join(target.tests)
    modules = ", ".join(f'"{m}"' for m in target.modules)
    return (f"# {name}: written by bench/mutation.py\n[cosmic-ray]\nmodule-path = [{modules}]\n"
            f"timeout = {timeout:.0f}\nexcluded-modules = []\n"
            f'test-command = "{sys.executable} -m pytest -q -x -p no:cacheprovider -p no:xdist {tests}"\n\n'
            '[cosmic-ray.distributor]\nname = "local"\n')


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nice", "-n", "19", *argv], cwd=cwd, env=env, capture_output=True, text=True)


def _line(tree: Path, module: str, lineno: int) -> str:
    lines = (tree / module).read_text().splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def _annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where a function's argument and return annotations are, in a module that never evaluates
    them (`from __future__ import annotations`): a mutant there changes nothing, so it is not run.
    Class-level annotations stay in: pydantic and dataclasses read those."""
    import ast

    tree = ast.parse(path.read_text())
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    if not future:
        return []
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            notes = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                     if x is not None and x.annotation is not None]
            notes += [node.returns] if node.returns is not None else []
            spans += [((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0))
                      for n in notes]
    return spans


def _skip_annotations(db: Path, tree: Path) -> int:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    skipped = 0
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        for item in list(work_db.work_items):
            m = item.mutations[0]
            key = str(m.module_path)
            if key not in spans:
                spans[key] = _annotation_spans(tree / key)
            if any(a <= tuple(m.start_pos) and tuple(m.end_pos) <= b for a, b in spans[key]):
                work_db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
                skipped += 1
    return skipped


def _mutated_line(diff: str) -> str:
    added = [d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
    return added[0] if len(added) == 1 else ""


def _forget_survivors(db: Path) -> int:
    """Drop the results of the mutants that survived (not the equivalent ones), so the next exec
    runs just those against the tests as they are now. The module itself must be unchanged."""
    from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
    from cosmic_ray.work_item import WorkerOutcome

    equivalent = {(f, line) for f, line, _ in EQUIVALENT}
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        again = [item.job_id for item, result in work_db.completed_work_items
                 if result.worker_outcome != WorkerOutcome.SKIPPED and not result.is_killed
                 and (str(item.mutations[0].module_path), _mutated_line(result.diff or "")) not in equivalent]
        # WorkDB has no call to drop one result; its session and table are what it uses itself
        with work_db._session_maker.begin() as session:
            session.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(again)).delete()
    return len(again)


def mutate(name: str, target: Target, show_diffs: bool, survivors_only: bool = False) -> tuple[int, int, int]:
    """(killed, survived, equivalent) for one target; prints its figures and survivors.
    `survivors_only`: run again only what survived the last run (after new tests)."""

    tree = WORK / name / "tree"
    pkgroot = WORK / name / "pkgroot"
    _copy_tree(tree)
    pkgroot.mkdir(parents=True, exist_ok=True)
    link = pkgroot / "pilothouse"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(tree, target_is_directory=True)
    env = _env(pkgroot)

    t0 = time.monotonic()
    base = _run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                 *target.tests], tree, env)
    took = time.monotonic() - t0
    if base.returncode != 0:  # every mutant would look killed: refuse to count anything
        print(f"{name}: the tests fail unmutated; fix them first:\n{base.stdout[-2000:]}{base.stderr[-1000:]}")
        return 0, 0, 0
    cfg, db = WORK / name / "cosmic-ray.toml", WORK / name / "session.sqlite"
    cfg.write_text(_config(name, target, max(30.0, took * 5)))
    cr = str(Path(sys.executable).with_name("cosmic-ray"))
    if survivors_only and db.exists():
        print(f"{name}: running the {_forget_survivors(db)} survivors of the last run again")
        steps: tuple[str, ...] = ("exec",)
    else:
        db.unlink(missing_ok=True)
        steps = ("init", "exec")
    for step in steps:
        out = _run([cr, step, str(cfg), str(db)], tree, env)
        if out.returncode != 0:
            print(f"{name}: cosmic-ray {step} failed:\n{out.stderr[-2000:]}")
            return 0, 0, 0
        if step == "init":
            _skip_annotations(db, tree)
    return report(name, target, show_diffs)


def report(name: str, target: Target, show_diffs: bool) -> tuple[int, int, int]:
    """(killed, survived, equivalent) from the module's last session; prints them and the survivors."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    tree, db = WORK / name / "tree", WORK / name / "session.sqlite"
    if not db.exists():
        print(f"{name}: no session yet (run: python bench/mutation.py {name})")
        return 0, 0, 0
    killed = survived = equivalent = in_annotations = 0
    rows = []
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        pending = work_db.num_work_items - work_db.num_results
        for item, result in work_db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                in_annotations += 1
                continue
            if result.is_killed:
                killed += 1
                continue
            m = item.mutations[0]
            module = str(m.module_path)
            text = _line(tree, module, m.start_pos[0])
            mutated = _mutated_line(result.diff or "")
            why = next((w for f, line, w in EQUIVALENT if f == module and line == mutated), None)
            if why is not None:
                equivalent += 1
            else:
                survived += 1
            rows.append((module, m.start_pos[0], m.operator_name, text, why, result.diff))
    counted = killed + survived
    rate = 100.0 * killed / counted if counted else 0.0
    print(f"{name:9} {rate:5.1f}% killed  ({killed} of {counted}; {equivalent} equivalent, "
          f"{survived} survived; {in_annotations} in annotations not run"
          + (f"; {pending} NOT RUN YET" if pending else "") + f")  {', '.join(target.modules)}")
    for module, line, op, text, why, diff in sorted(rows, key=lambda r: (r[0], r[1], r[2])):
        tag = f"equivalent: {why}" if why else "SURVIVED"
        print(f"    {module}:{line} {op} [{tag}]\n        {text}")
        if show_diffs and not why and diff:
            print("".join(f"        {d}\n" for d in diff.splitlines() if d.startswith(("+", "-"))
                          and not d.startswith(("+++", "---"))), end="")
    return killed, survived, equivalent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"modules to mutate: {', '.join(TARGETS)}")
    ap.add_argument("--all", action="store_true", help="every module, smallest first")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests")
    ap.add_argument("--diffs", action="store_true", help="print each survivor's diff")
    ap.add_argument("--survivors", action="store_true",
                    help="run only the last run's survivors again (after adding tests; the module unchanged)")
    ap.add_argument("--report", action="store_true",
                    help="print the figures of the last run of each module again, without running")
    args = ap.parse_args(argv)
    if args.list:
        for name, t in TARGETS.items():
            print(f"{name:9} {', '.join(t.modules)}\n          judged by {', '.join(t.tests)}")
        return 0
    names = list(TARGETS) if args.all else args.names
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        ap.error(f"name one or more of {', '.join(TARGETS)} (or --all)" +
                 (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    total_k = total_s = 0
    for name in names:
        if args.report:
            k, s, _ = report(name, TARGETS[name], args.diffs)
        else:
            k, s, _ = mutate(name, TARGETS[name], args.diffs, survivors_only=args.survivors)
        total_k, total_s = total_k + k, total_s + s
    if len(names) > 1 and total_k + total_s:
        print(f"{'all':9} {100.0 * total_k / (total_k + total_s):5.1f}% killed  ({total_k} of {total_k + total_s})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
