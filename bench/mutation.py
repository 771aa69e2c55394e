"""Mutation testing of the modules where a silent bug costs the most, with cosmic-ray.

    python bench/mutation.py guard budgets      # some modules
    python bench/mutation.py --all              # every module below
    python bench/mutation.py --list             # the modules and the tests that judge them
    python bench/mutation.py --report --all     # the last run's figures again (e.g. after the equivalents grew)
    python bench/mutation.py --survivors budgets  # after new tests: run only the last survivors again
    python bench/mutation.py --sample 60 git    # 60 mutants, a fixed random choice; 90 later adds 30

For each module: copy the tree (so a mutant never sits in the working tree, even if this is
killed) and install the copy the way the product runs: a venv of its own whose only pilothouse is
an editable install of the copy (`pip install --no-deps -e COPY`), its dependencies shared from
this interpreter's site-packages by a .pth. pilothouse starts its own processes (the supervisor,
a dispatch, the builtin worker, the net relay) with `python -I`, which ignores PYTHONPATH: only an
install makes those children import the mutant too. Then check the module's tests pass unmutated,
let cosmic-ray apply one mutation at a time and run those tests (never the whole suite) with the
copy's Python, under `nice -n 19` (--nice) and one mutant at a time.

Prints the kill rate per module, which test killed how many, every surviving mutant with its
diff, and the mutants whose tests ran out of time apart (a timeout is not counted as a kill: on a
loaded machine it says nothing of the mutant). A survivor listed in
bench/mutation_equivalent.yaml (it changes no behaviour) is reported as such and left out of the
rate. Goal: ≥ 90 %. A module's session (.mutation/NAME/session.sqlite) is kept: run again, it
resumes where it stopped, as long as the mutated files are unchanged. Where a module has too many
mutants for the time there is, --sample runs a seeded random choice and the report says so.

Why cosmic-ray: mutmut 3 copies `src/` (or the package dir) into `mutants/` and imports the
package from there, which this flat layout (the repo root *is* `pilothouse` via package-dir)
does not fit; cosmic-ray mutates the file in place and runs any test command, so the installed
copy below is all it needs. The copy lives under the repo (`.mutation/`, ignored by git), not in
/tmp: a worker under bubblewrap gets a private /tmp and must still see the package.
"""

from __future__ import annotations

import argparse
import os
import re
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


# smallest and most valuable first: the safety checks, then the rest
TARGETS: dict[str, Target] = {
    "seal": Target(("core/executor/seal.py",), ("tests/core/test_seal.py",)),
    "hostpython": Target(("providers/hostpython.py",), ("tests/providers/test_hostpython.py",)),
    # a test id, not a file, where the file's other tests judge something else: the fast ones first,
    # since -x stops at the first that kills
    "leaks": Target(("core/git/leaks.py",), tuple(f"tests/core/test_leaks.py::{t}" for t in (
        "test_a_literal_password_or_token_assignment_gets_no_commit", "test_every_kind_of_github_token_gets_no_commit",
        "test_a_file_marked_binary_in_gitattributes_is_scanned_as_text",
        "test_work_whose_diff_git_cannot_make_is_not_committed",
        "test_the_refusal_names_the_first_place_and_counts_the_others",
        "test_the_scan_catches_base64_forms_and_shapes_but_not_code_that_reads_a_key",
        "test_a_marked_line_lets_a_fake_token_through_but_never_a_configured_key",
        "test_a_builder_that_writes_its_credential_gets_no_commit_and_a_hint_fixes_it",
        "test_a_retry_commits_the_operators_cleaned_worktree_only_once_no_key_is_left")) + tuple(
        f"tests/core/test_hostile_names.py::{t}" for t in (
            "test_the_commit_scan_reads_names_links_and_the_message",
            "test_the_merge_scan_refuses_a_branch_whose_names_carry_the_key")) + (
        "tests/core/test_integration.py::test_a_train_leaves_out_a_conflict_and_a_credential_and_merges_the_rest",)),
    "serveguard": Target(("tui/serve/guard.py",), tuple(f"tests/tui/test_serve.py::{t}" for t in (
        "test_every_request_without_the_token_is_refused", "test_an_empty_or_partial_token_opens_nothing",
        "test_an_origin_with_a_path_on_the_same_host_is_refused", "test_foreign_host_and_foreign_origin_are_refused",
        "test_a_request_without_a_host_is_refused", "test_unix_socket_mode_is_owner_only_and_still_wants_the_token"))
        + ("tests/tui/test_serve_origin.py",)),
    "claims": Target(("core/dispatch/claims.py",), ("tests/core/test_claims.py", "tests/core/test_claims_citations.py")),
    "scrub": Target(("providers/scrub.py",), ("tests/providers/test_scrub.py", "tests/providers/test_scrub_sqlite.py")),
    "inbound": Target(("core/notify/inbound.py",), ("tests/core/test_notify_inbound.py", "tests/core/test_notify_inbound_from.py",
                                                    "tests/core/test_notify_inbound_parts.py")),
    # the file's read_in_tree tests judge workerfs (and one runs two jobs): not fsutil's
    "fsutil": Target(("providers/fsutil.py",), tuple(f"tests/providers/test_fsutil.py::{t}" for t in (
        "test_an_atomic_write_replaces_a_hard_link_and_gets_its_mode_whatever_the_umask",
        "test_a_write_that_fills_the_disk_names_the_file_and_leaves_the_old_one_and_no_temp",
        "test_a_failed_rename_keeps_its_own_error_and_leaves_no_temp",
        "test_a_write_interrupted_at_any_step_leaves_the_old_file_and_no_temp",
        "test_a_lock_is_held_only_while_its_process_holds_it_and_looking_takes_nothing",
        "test_a_private_dir_is_made_with_its_parents_and_an_existing_one_is_closed_to_others",
        "test_a_durable_write_is_synced_before_its_rename_and_a_quick_one_is_not",
        "test_a_database_locked_past_every_try_is_an_error_not_a_silent_journal",
        "test_connections_opening_a_new_database_at_once_all_get_it_in_wal_mode"))),
    "weakening": Target(("core/git/weakening.py", "core/git/holdout.py"),
                        ("tests/core/test_weakening.py", "tests/core/test_holdout.py", "tests/core/test_weakening_rules.py")),
    "policy": Target(("providers/confine/policy.py",),
                     ("tests/providers/test_confine_policy.py", "tests/providers/test_confine.py",
                      "tests/providers/test_probe.py", "tests/providers/test_confine_toolroots.py",
                      "tests/providers/test_gate_sandbox_plan.py", "tests/providers/test_confine_dispatch.py")),
    "mounts": Target(("providers/confine/mounts.py",),
                     ("tests/providers/test_confine.py", "tests/providers/test_gate_sandbox_plan.py",
                      "tests/providers/test_confine_toolroots.py", "tests/providers/test_confine_net.py",
                      "tests/providers/test_confine_shared.py", "tests/providers/test_modes.py",
                      "tests/providers/test_confine_mounts.py")),
    "guard": Target(("providers/guard.py",), ("tests/providers/test_guard.py",)),
    "redact": Target(("providers/redact.py",), ("tests/providers/test_redact.py",)),
    "budgets": Target(("core/stops/budgets.py",), ("tests/core/test_budgets.py",)),
    "verdict": Target(("core/dispatch/verdict.py",), ("tests/core/test_verdict.py",)),
    "quota": Target(("core/stops/quota.py",), ("tests/core/test_quota.py",)),
    "contract": Target(("providers/contract.py", "providers/contract_fast.py", "providers/contract_events.py"),
                       ("tests/providers/test_contract.py", "tests/providers/test_contract_fast.py",
                        "tests/core/test_verdict.py")),
    "problems": Target(("core/stops/problems.py", "core/stops/answering.py", "core/stops/replies.py"), ("tests/core/test_problems.py",)),
    "events": Target(("core/state/events.py",), ("tests/core/test_events.py",)),
    "git": Target(("core/git/integration.py", "core/git/worktrees.py", "core/git/checkout.py"),
                  ("tests/core/test_integration.py", "tests/core/test_worktrees.py")),
    "confine": Target(("providers/confine/bwrap.py", "providers/confine/repoview.py", "providers/confine/mounts.py",
                       "providers/confine/policy.py", "providers/confine/probe.py", "providers/confine/probe_reads.py"),
                      ("tests/providers/test_confine.py", "tests/providers/test_probe.py",
                       "tests/providers/test_confine_repoview.py",
                       "tests/providers/test_gate_sandbox_plan.py", "tests/providers/test_confine_toolroots.py",
                       "tests/providers/test_confine_net.py")),
}

EQUIVALENT_FILE = ROOT / "bench" / "mutation_equivalent.yaml"
SAMPLE_SEED = 22  # fixed, so a sample is the same mutants on every machine, and grows by adding to them
OUTSIDE_SAMPLE = "outside the sample"  # the output of a mutant a sampled run leaves out
IN_ANNOTATION = "in an annotation"
NICENESS = [19]  # --nice: how far the runs step back for other work on the machine
TIMEOUT = "timeout"  # cosmic-ray's output for a test command it stopped at its time limit
# the test's id up to its parameters (which may hold spaces): a parametrized test counts as one
_FAILED = re.compile(r"^(?:FAILED|ERROR) ([^\s\[]+)", re.MULTILINE)


def equivalent() -> list[tuple[str, str, str]]:
    """Survivors that change no behaviour: (file, the line as the mutant writes it, why), from
    EQUIVALENT_FILE. Matched on the mutated line's text, so an edit elsewhere keeps them; an edit
    of the line itself makes the mutant show up again, to be judged again."""
    import yaml

    try:
        rows = yaml.safe_load(EQUIVALENT_FILE.read_text()) or []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SystemExit(f"{EQUIVALENT_FILE.name}{where}: not valid YAML ({getattr(exc, 'problem', exc)}); "
                         "quote a value that holds ': '") from None
    if not isinstance(rows, list):
        raise SystemExit(f"{EQUIVALENT_FILE.name}: must be a list of entries with file, line and why")
    for i, r in enumerate(rows):
        if not (isinstance(r, dict) and all(isinstance(r.get(k), str) and r[k] for k in ("file", "line", "why"))):
            raise SystemExit(f"{EQUIVALENT_FILE.name}: entry {i + 1} needs non-empty file, line and why strings")
    return [(r["file"], r["line"], r["why"]) for r in rows]


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


def _shared_site_dirs() -> list[str]:
    """The site-packages this interpreter imports its dependencies from (a venv of its own, or one
    that shares another's by a .pth): the copy's venv reads the same ones, so nothing is installed twice."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def _installed_from(python: Path) -> str | None:
    """Where `python -I` imports pilothouse from (as a child of the product would), or None."""
    out = subprocess.run([str(python), "-I", "-c", "import pilothouse, sys; sys.stdout.write(pilothouse.__file__)"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return out.stdout if out.returncode == 0 else None


def _install(venv: Path, tree: Path) -> Path:
    """A venv whose pilothouse is an editable install of `tree` (deps shared): its python. Raises
    SystemExit with pip's words when the install fails."""
    python = venv / "bin" / "python"
    want = str(tree / "__init__.py")
    if python.exists() and _installed_from(python) == want:
        return python  # the copy is laid anew each run, at the same place: the install still points at it
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdin=subprocess.DEVNULL)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # a path line in a .pth joins sys.path (the .pth files there are not run: their editable
    # finders, pointing at the working tree, stay out)
    (site / "_mutation_shared_deps.pth").write_text("".join(d + "\n" for d in _shared_site_dirs()))
    # -I drops PYTHONDONTWRITEBYTECODE: a child must never write (then read) byte code of a mutant
    # whose source has the size and mtime second of the one before
    (site / "_mutation_no_bytecode.pth").write_text("import sys; sys.dont_write_bytecode = True\n")
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                          "-e", str(tree)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    got = _installed_from(python) if pip.returncode == 0 else None
    if got != want:
        raise SystemExit(f"cannot install the copy in {venv} (`pip install --no-deps -e {tree}`): "
                         f"{(pip.stderr or pip.stdout).strip()[-1500:] or f'a -I child imports pilothouse from {got}'}")
    return python


def _env(venv: Path) -> dict[str, str]:
    from pilothouse.providers.hostpython import CODE_VARS

    # nothing points Python elsewhere: the copy's venv alone says where pilothouse is
    env = {k: v for k, v in os.environ.items() if k not in CODE_VARS}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PILOTHOUSE_TEST_RUNNERS", str(ROOT / ".runners"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a stale .pyc of a mutant must never be imported
    return env


_DURATION = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+(\S.*?)\s*$", re.MULTILINE)


def fastest_first(durations_output: str, tests: tuple[str, ...]) -> tuple[str, ...]:
    """The test ids of an unmutated run (its `--durations=0` lines), quickest first: with -x a
    mutant's run stops at its first failing test, so a mutant a quick test kills never waits for a
    slow one (a dispatch), and a survivor still runs every test. `tests` when no id is named."""
    took: dict[str, float] = {}
    for secs, test_id in _DURATION.findall(durations_output):
        took[test_id] = took.get(test_id, 0.0) + float(secs)
    # an id the shell or TOML would read apart is left to pytest to find again from its file
    if not took or any(c in t for t in took for c in "\"\\'"):
        return tests
    return tuple(sorted(took, key=lambda t: (took[t], t)))


def _config(name: str, tests_in_order: tuple[str, ...], timeout: float, python: Path, target: Target) -> str:
    tests = " ".join(f"'{t}'" if " " in t else t for t in tests_in_order)
    modules = ", ".join(f'"{m}"' for m in target.modules)
    return (f"# {name}: written by bench/mutation.py\n[cosmic-ray]\nmodule-path = [{modules}]\n"
            f"timeout = {timeout:.0f}\nexcluded-modules = []\n"
            f'test-command = "{python} -m pytest -q -x -p no:cacheprovider -p no:xdist {tests}"\n\n'
            '[cosmic-ray.distributor]\nname = "local"\n')


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nice", "-n", str(NICENESS[0]), *argv], cwd=cwd, env=env, capture_output=True, text=True)


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
                work_db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED,
                                                           output=IN_ANNOTATION))
                skipped += 1
    return skipped


def _drop_results(work_db: object, job_ids: list[str]) -> None:
    from cosmic_ray.work_db import WorkResultStorage

    # WorkDB has no call to drop one result; its session and table are what it uses itself
    with work_db._session_maker.begin() as session:  # type: ignore[attr-defined]
        session.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(job_ids)).delete()


def _sample(db: Path, size: int | None) -> tuple[int, int]:
    """Keep `size` mutants (outside annotations) in the run and mark the rest outside the sample;
    None keeps them all. The order is a fixed shuffle of the job ids, so a larger size later keeps
    every mutant already run and adds the next ones. Returns (in the sample, of all)."""
    import random

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(db), WorkDB.Mode.open) as work_db:
        results = dict(work_db.results)
        # a mutant in an annotation never runs; any other left out was left out by a sample
        items = [item for item in work_db.work_items
                 if not (item.job_id in results and results[item.job_id].worker_outcome == WorkerOutcome.SKIPPED
                         and results[item.job_id].output != OUTSIDE_SAMPLE)]
        # job ids are random per init: order by what the mutant is, so a seed picks the same ones anywhere
        items.sort(key=lambda i: (str(i.mutations[0].module_path), tuple(i.mutations[0].start_pos),
                                  i.mutations[0].operator_name, i.mutations[0].occurrence))
        runnable = [item.job_id for item in items]
        random.Random(SAMPLE_SEED).shuffle(runnable)
        keep = set(runnable if size is None else runnable[:size])
        outside = [j for j in runnable if j not in keep]
        back_in = [j for j in keep if j in results and results[j].output == OUTSIDE_SAMPLE]
        _drop_results(work_db, back_in)
        work_db.set_multiple_results([j for j in outside if j not in results],
                                     WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=OUTSIDE_SAMPLE))
    return len(keep), len(runnable)


def _mutated_line(diff: str) -> str:
    added = [d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
    return added[0] if len(added) == 1 else ""


def _forget_survivors(db: Path) -> int:
    """Drop the results of the mutants that survived (not the equivalent ones) or timed out, so the next exec
    runs just those against the tests as they are now. The module itself must be unchanged."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    known = {(f, line) for f, line, _ in equivalent()}
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        again = [item.job_id for item, result in work_db.completed_work_items
                 if result.worker_outcome != WorkerOutcome.SKIPPED
                 and (not result.is_killed or result.output == TIMEOUT)
                 and (str(item.mutations[0].module_path), _mutated_line(result.diff or "")) not in known]
        _drop_results(work_db, again)
    return len(again)


def _fingerprint(target: Target) -> str:
    """Of the mutated files: a session's mutants are positions in them, valid only while they are unchanged."""
    import hashlib

    h = hashlib.sha256()
    for m in target.modules:
        h.update(m.encode() + b"\0" + (ROOT / m).read_bytes() + b"\0")
    return h.hexdigest()


def mutate(name: str, target: Target, show_diffs: bool, survivors_only: bool = False,
           sample: int | None = None, fresh: bool = False) -> tuple[int, int, int]:
    """(killed, survived, equivalent) for one target; prints its figures and survivors.
    A session of the same module text is resumed (only mutants without a result run) unless `fresh`;
    `survivors_only`: run again only what survived the last run (after new tests); `sample`: run
    that many mutants, a fixed random choice, instead of all."""

    tree = WORK / name / "tree"
    _copy_tree(tree)
    venv = WORK / name / "venv"
    python = _install(venv, tree)
    env = _env(venv)

    t0 = time.monotonic()
    base = _run([str(python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                 "--durations=0", "--durations-min=0", *target.tests], tree, env)
    took = time.monotonic() - t0
    if base.returncode != 0:  # every mutant would look killed: refuse to count anything
        print(f"{name}: the tests fail unmutated; fix them first:\n{base.stdout[-2000:]}{base.stderr[-1000:]}")
        return 0, 0, 0
    cfg, db = WORK / name / "cosmic-ray.toml", WORK / name / "session.sqlite"
    stamp = WORK / name / "modules.sha256"
    cfg.write_text(_config(name, fastest_first(base.stdout, target.tests), max(30.0, took * 5), python, target))
    # by module, not by the script beside this interpreter: a venv that shares its packages by a .pth has none
    cr = [sys.executable, "-c", "import sys; from cosmic_ray.cli import main; sys.exit(main())"]
    same = db.exists() and stamp.exists() and stamp.read_text() == _fingerprint(target)
    if survivors_only and not same:
        print(f"{name}: no session of the module as it is now: run it in full first")
        return 0, 0, 0
    if survivors_only:
        print(f"{name}: running the {_forget_survivors(db)} survivors of the last run again")
    elif same and not fresh:
        print(f"{name}: resuming the last session (--fresh starts over)")
    else:
        db.unlink(missing_ok=True)
        stamp.unlink(missing_ok=True)
        out = _run([*cr, "init", str(cfg), str(db)], tree, env)
        if out.returncode != 0:
            print(f"{name}: cosmic-ray init failed:\n{out.stderr[-2000:]}")
            return 0, 0, 0
        _skip_annotations(db, tree)
        stamp.write_text(_fingerprint(target))
    if not survivors_only:
        kept, of = _sample(db, sample)
        if sample is not None:
            print(f"{name}: a sample of {kept} of {of} mutants (seed {SAMPLE_SEED})")
    out = _run([*cr, "exec", str(cfg), str(db)], tree, env)
    if out.returncode != 0:
        print(f"{name}: cosmic-ray exec failed:\n{out.stderr[-2000:]}")
        return 0, 0, 0
    return report(name, target, show_diffs)


def killed_by(output: str | None) -> str:
    """The test that killed a mutant, from pytest's short summary (-x: the first that failed)."""
    found = _FAILED.search(output or "")
    if found is None:
        return "(no test named: the test command failed)"
    return found.group(1).rsplit("/", 1)[-1]


def report(name: str, target: Target, show_diffs: bool) -> tuple[int, int, int]:
    """(killed, survived, equivalent) from the module's last session; prints them, the tests that
    killed, the survivors and the mutants whose tests timed out (counted neither way)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    tree, db = WORK / name / "tree", WORK / name / "session.sqlite"
    if not db.exists():
        print(f"{name}: no session yet (run: python bench/mutation.py {name})")
        return 0, 0, 0
    known = equivalent()
    killed = survived = equivalent_n = in_annotations = outside = 0
    rows = []
    timeouts: list[tuple[str, int, str, str]] = []
    by_test: dict[str, int] = {}
    with use_db(str(db), WorkDB.Mode.open) as work_db:
        pending = work_db.num_work_items - work_db.num_results
        for item, result in work_db.completed_work_items:
            m = item.mutations[0]
            module = str(m.module_path)
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                if result.output == OUTSIDE_SAMPLE:
                    outside += 1
                else:
                    in_annotations += 1
                continue
            if result.test_outcome == TestOutcome.KILLED and result.output == TIMEOUT:
                timeouts.append((module, m.start_pos[0], m.operator_name, _line(tree, module, m.start_pos[0])))
                continue
            if result.is_killed:
                killed += 1
                test = killed_by(result.output)
                by_test[test] = by_test.get(test, 0) + 1
                continue
            text = _line(tree, module, m.start_pos[0])
            mutated = _mutated_line(result.diff or "")
            why = next((w for f, line, w in known if f == module and line == mutated), None)
            if why is not None:
                equivalent_n += 1
            else:
                survived += 1
            rows.append((module, m.start_pos[0], m.operator_name, text, why, result.diff))
    counted = killed + survived
    rate = 100.0 * killed / counted if counted else 0.0
    sampled = (f"; a random sample of {counted + equivalent_n + pending + len(timeouts)} of "
               f"{counted + equivalent_n + pending + len(timeouts) + outside} mutants, seed {SAMPLE_SEED}"
               if outside else "")
    print(f"{name:9} {rate:5.1f}% killed  ({killed} of {counted}; {equivalent_n} equivalent, "
          f"{survived} survived; {in_annotations} in annotations not run{sampled}"
          + (f"; {len(timeouts)} TIMED OUT, not counted" if timeouts else "")
          + (f"; {pending} NOT RUN YET" if pending else "") + f")  {', '.join(target.modules)}")
    if by_test:
        print("    killed by: " + ", ".join(f"{t} {n}" for t, n in sorted(by_test.items(), key=lambda kv: (-kv[1], kv[0]))))
    for module, line, op, text, why, diff in sorted(rows, key=lambda r: (r[0], r[1], r[2])):
        tag = f"equivalent: {why}" if why else "SURVIVED"
        print(f"    {module}:{line} {op} [{tag}]\n        {text}")
        if show_diffs and not why and diff:
            print("".join(f"        {d}\n" for d in diff.splitlines() if d.startswith(("+", "-"))
                          and not d.startswith(("+++", "---"))), end="")
    for module, line, op, text in sorted(timeouts):
        print(f"    {module}:{line} {op} [TIMED OUT: run again with --survivors]\n        {text}")
    return killed, survived, equivalent_n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("names", nargs="*", help=f"modules to mutate: {', '.join(TARGETS)}")
    ap.add_argument("--all", action="store_true", help="every module, smallest first")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests")
    ap.add_argument("--diffs", action="store_true", help="print each survivor's diff")
    ap.add_argument("--survivors", action="store_true",
                    help="run only the last run's survivors again (after adding tests; the module unchanged)")
    ap.add_argument("--report", action="store_true",
                    help="print the figures of the last run of each module again, without running")
    ap.add_argument("--sample", type=int, metavar="N",
                    help=f"run N mutants per module, a fixed random choice (seed {SAMPLE_SEED}), not all; "
                         "a larger N later adds to the same ones")
    ap.add_argument("--fresh", action="store_true",
                    help="start a module's session over (by default one of the same module text resumes)")
    ap.add_argument("--nice", type=int, default=19, metavar="N",
                    help="the niceness the runs get (19: any other work on the machine goes first)")
    args = ap.parse_args(argv)
    if not 0 <= args.nice <= 19:
        ap.error(f"--nice {args.nice}: give a niceness from 0 to 19")
    NICENESS[0] = args.nice
    if args.list:
        for name, t in TARGETS.items():
            print(f"{name:9} {', '.join(t.modules)}\n          judged by {', '.join(t.tests)}")
        return 0
    names = list(TARGETS) if args.all else args.names
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        ap.error(f"name one or more of {', '.join(TARGETS)} (or --all)" +
                 (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    if args.sample is not None and args.sample < 1:
        ap.error("--sample needs a count of 1 or more")
    total_k = total_s = 0
    for name in names:
        if args.report:
            k, s, _ = report(name, TARGETS[name], args.diffs)
        else:
            k, s, _ = mutate(name, TARGETS[name], args.diffs, survivors_only=args.survivors,
                             sample=args.sample, fresh=args.fresh)
        total_k, total_s = total_k + k, total_s + s
    if len(names) > 1 and total_k + total_s:
        print(f"{'all':9} {100.0 * total_k / (total_k + total_s):5.1f}% killed  ({total_k} of {total_k + total_s})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
