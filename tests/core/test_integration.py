"""Integration: merges in a dedicated checkout, rollback, idempotence; the operator's checkout untouched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pilothouse.core.git import checkout as co
from pilothouse.core.git import integration as integ
from pilothouse.core.git import worktrees as wt
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import ProjectConfig
from pilothouse.providers.errors import UserError
from support import git, until

PY = sys.executable
# the project's check, without pytest's start-up cost (test_gates runs the real pytest)
CHECK = f"{PY} -c \"import sys; sys.path.insert(0, 'src'); from calc import add; assert add(2, 3) == 5\""


def project(full: str = CHECK, **kw) -> ProjectConfig:
    return ProjectConfig.model_validate({"gates": {"fast": "true", "full": full}, **kw})


@pytest.fixture
def layout(git_repo: Path) -> RepoLayout:
    return RepoLayout(git_repo)


def task_branch(layout: RepoLayout, task: str, files: dict[str, str], base: str = "pilothouse/integration/j") -> str:
    integ.ensure_integration_checkout(layout, project(), "j")
    path, branch = wt.create_worktree(layout, "j", task, base)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    assert co.commit_all(path, f"{task}: work")
    return branch


def test_merge_ok_and_idempotent(layout: RepoLayout) -> None:
    cfg = project()
    # the operator has uncommitted edits on their own branch: they must survive everything below
    (layout.root / "README.md").write_text("# demo project\nlocal edit, not committed\n")
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    assert not checkout.is_relative_to(layout.root)
    branch = task_branch(layout, "slug", {"src/slug.py": "def slug(s):\n    return s.lower()\n"})
    res = integ.merge_task(layout, cfg, "j", branch, "merge j/slug")
    assert res.ok and res.merged_sha and res.gate and res.gate.passed, res
    assert git(checkout, "log", "-1", "--format=%s") == "merge j/slug"
    assert git(checkout, "rev-parse", "HEAD^2") == git(layout.root, "rev-parse", branch)
    again = integ.merge_task(layout, cfg, "j", branch, "merge j/slug")
    assert again.ok and again.already_merged and again.merged_sha == res.merged_sha
    assert git(checkout, "rev-list", "--count", "--merges", "HEAD") == "1"  # no double merge
    assert integ.integration_head(layout, cfg, "j") == res.merged_sha
    # operator's checkout: same branch, same HEAD, edit intact, no new files
    assert git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert "local edit" in (layout.root / "README.md").read_text()
    assert not (layout.root / "src" / "slug.py").exists()
    assert git(layout.root, "status", "--porcelain") == "M README.md"


def test_conflict_rolls_back(layout: RepoLayout) -> None:
    cfg = project(full="true")
    a = task_branch(layout, "a", {"src/calc.py": "def add(a, b):\n    return b + a\n"})
    b = task_branch(layout, "b", {"src/calc.py": "def add(a, b):\n    return sum((a, b))\n"})
    assert integ.merge_task(layout, cfg, "j", a, "merge a").ok
    checkout = integ.integration_path(layout, "j")
    before = git(checkout, "rev-parse", "HEAD")
    res = integ.merge_task(layout, cfg, "j", b, "merge b")
    assert not res.ok and res.conflicts == ["src/calc.py"]
    assert "merge conflict in src/calc.py" in (res.reason or "") and res.previous_sha == before
    assert git(checkout, "rev-parse", "HEAD") == before
    assert git(checkout, "status", "--porcelain") == ""


def test_gate_failure_rolls_back(layout: RepoLayout) -> None:
    cfg = project()
    branch = task_branch(layout, "bad", {"src/calc.py": "def add(a, b):\n    return a - b\n"})
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    before = git(checkout, "rev-parse", "HEAD")
    res = integ.merge_task(layout, cfg, "j", branch, "merge bad")
    assert not res.ok and res.gate and not res.gate.passed and "failed" in (res.reason or "")
    assert "rolled back" in (res.reason or "")
    assert git(checkout, "rev-parse", "HEAD") == before
    # a later, fixed branch merges cleanly
    fixed = task_branch(layout, "good", {"src/extra.py": "X = 1\n"})
    assert integ.merge_task(layout, cfg, "j", fixed, "merge good").ok


def test_interrupted_merge_is_redone_not_kept(layout: RepoLayout) -> None:
    """A supervisor killed mid-gate leaves a merge commit and a pending marker: the next call undoes it
    and merges again under the gate, so there is exactly one gated merge."""
    cfg = project(full="true")
    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    previous = git(checkout, "rev-parse", "HEAD")
    tip = git(checkout, "rev-parse", branch)
    from pilothouse.providers.fsutil import atomic_write_json
    atomic_write_json(integ.pending_file(layout, "j"), {"branch": branch, "tip": tip, "previous_sha": previous})
    git(checkout, "merge", "--no-ff", "-m", "half-done", tip)
    res = integ.merge_task(layout, cfg, "j", branch, "merge t")
    assert res.ok and not res.already_merged and res.previous_sha == previous
    assert git(checkout, "log", "--format=%s", f"{previous}..HEAD", "--first-parent") == "merge t"


def test_nothing_to_merge_and_missing_branch(layout: RepoLayout) -> None:
    cfg = project(full="true")
    integ.ensure_integration_checkout(layout, cfg, "j")
    wt.create_worktree(layout, "j", "empty", "pilothouse/integration/j")
    res = integ.merge_task(layout, cfg, "j", "ph/j/empty", "m")
    assert not res.ok and "nothing to merge" in (res.reason or "")
    res = integ.merge_task(layout, cfg, "j", "ph/j/ghost", "m")
    assert not res.ok and "does not exist" in (res.reason or "")


def test_main_refused(layout: RepoLayout) -> None:
    cfg = project().model_copy(update={"integration_branch": "main"})  # bypasses the yaml check
    with pytest.raises(UserError, match="'main' is protected"):
        integ.ensure_integration_checkout(layout, cfg, "j")
    with pytest.raises(Exception, match="protected"):
        ProjectConfig.model_validate({"gates": {"fast": "a", "full": "b"}, "integration_branch": "master"})


def test_dirty_integration_checkout_refused(layout: RepoLayout) -> None:
    cfg = project(full="true")
    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    (checkout / "README.md").write_text("edited by hand\n")
    with pytest.raises(UserError, match="has uncommitted changes \\(README.md\\): commit or discard"):
        integ.merge_task(layout, cfg, "j", branch, "m")


def test_branch_checked_out_by_operator_refused(layout: RepoLayout) -> None:
    git(layout.root, "checkout", "-q", "-b", "pilothouse/integration/j")
    with pytest.raises(UserError, match="is checked out at"):
        integ.ensure_integration_checkout(layout, project(), "j")


def test_supervisor_killed_mid_gate(layout: RepoLayout, tmp_path: Path) -> None:
    """SIGKILL the merging process while its gate runs: the orphaned gate is ended, the half-gated merge
    undone, and the next merge_task merges the branch exactly once."""
    import json
    import os
    import signal
    import subprocess
    import time

    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    code = ("import sys; from pathlib import Path\n"
            "from pilothouse.core.git.integration import merge_task\n"
            "from pilothouse.core.records.layout import RepoLayout\n"
            "from pilothouse.core.records.project import ProjectConfig\n"
            "cfg = ProjectConfig.model_validate({'gates': {'fast': 'true', 'full': 'sleep 60'}})\n"
            "merge_task(RepoLayout(Path(sys.argv[1])), cfg, 'j', sys.argv[2], 'merge t')\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(layout.root), branch])
    pending = integ.pending_file(layout, "j")

    def gate_pgid() -> int | None:
        try:
            return json.loads(pending.read_text()).get("gate_pgid")
        except (FileNotFoundError, ValueError):
            return None

    pgid = until(gate_pgid, "the gate started")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    os.kill(pgid, 0)  # the orphaned gate still runs
    checkout = integ.integration_path(layout, "j")
    res = integ.merge_task(layout, project(full="true"), "j", branch, "merge t")
    assert res.ok and not res.already_merged
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # killed; reaped by init shortly after
            os.kill(pgid, 0)
            time.sleep(0.02)
    assert git(checkout, "rev-list", "--count", "--merges", "HEAD") == "1"
    assert integ.merge_task(layout, project(full="true"), "j", branch, "merge t").already_merged


def test_sync_integration_brings_the_base_branch_forward(layout: RepoLayout) -> None:
    cfg = project(full="true")
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    assert integ.sync_integration(layout, cfg, "j")["state"] == "up-to-date"
    (layout.root / "NEW.md").write_text("operator's new commit\n")
    git(layout.root, "add", "NEW.md")
    git(layout.root, "commit", "-qm", "operator work")
    res = integ.sync_integration(layout, cfg, "j")
    assert res["state"] == "fast-forwarded" and (checkout / "NEW.md").exists()
    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    assert integ.merge_task(layout, cfg, "j", branch, "m").ok
    assert integ.sync_integration(layout, cfg, "j")["state"] == "up-to-date"  # main is behind: nothing to do
    # main moves on while the integration branch holds merges of its own: a merge commit brings it in
    (layout.root / "OTHER.md").write_text("more\n")
    git(layout.root, "add", "OTHER.md")
    git(layout.root, "commit", "-qm", "diverging work")
    head = git(checkout, "rev-parse", "HEAD")
    res = integ.sync_integration(layout, cfg, "j")
    assert res["state"] == "merged" and res["previous"] == head
    assert git(checkout, "log", "-1", "--format=%P %s").split() == [head, git(layout.root, "rev-parse", "main"),
                                                                    "Bring", "main", "into", "pilothouse/integration/j"]
    assert (checkout / "OTHER.md").exists() and (checkout / "f.txt").exists()
    # a base commit that conflicts with the integration branch: rolled back and named
    (checkout / "f.txt").write_text("integration\n")
    git(checkout, "commit", "-qam", "integration edit")
    (layout.root / "f.txt").write_text("main\n")
    git(layout.root, "add", "f.txt")
    git(layout.root, "commit", "-qm", "main edit")
    head = git(checkout, "rev-parse", "HEAD")
    res = integ.sync_integration(layout, cfg, "j")
    assert res["state"] == "conflict" and res["conflicts"] == ["f.txt"]
    assert git(checkout, "rev-parse", "HEAD") == head and git(checkout, "status", "--porcelain") == ""
    assert git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"


def test_the_base_branch_is_configurable_and_must_exist(layout: RepoLayout) -> None:
    git(layout.root, "branch", "develop")
    git(layout.root, "checkout", "-q", "-b", "topic")
    (layout.root / "TOPIC.md").write_text("not for jobs\n")
    git(layout.root, "add", "TOPIC.md")
    git(layout.root, "commit", "-qm", "topic work")
    cfg = project(full="true", base_branch="develop")
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    assert git(checkout, "rev-parse", "HEAD") == git(layout.root, "rev-parse", "develop")
    assert not (checkout / "TOPIC.md").exists()  # not the checked-out branch: the configured one
    with pytest.raises(UserError, match="base_branch: there is no branch 'trunk'"):
        integ.base_branch(layout, project(full="true", base_branch="trunk"))
    with pytest.raises(ValueError, match="must differ"):
        project(full="true", base_branch="pilothouse/integration/j")


def test_merge_gate_is_confined(layout: RepoLayout, isolated_home: Path) -> None:
    """The combined gate runs the merged (worker-written) code: it cannot reach the operator's checkout,
    $HOME or a task worktree; the merge is rolled back, nothing appears there."""
    victims = [layout.root / "pwned.txt", isolated_home / ".profile"]
    evil = "import pathlib\n" + "".join(f"pathlib.Path({str(v)!r}).write_text('x')\n" for v in victims)
    branch = task_branch(layout, "evil", {"evil.py": evil})
    other = wt.worktree_root(layout) / "j" / "evil"
    res = integ.merge_task(layout, project(full=f"{PY} evil.py"), "j", branch, "merge evil")
    assert not res.ok and res.gate and not res.gate.passed and "rolled back" in (res.reason or "")
    assert "Error" in res.gate.output_tail
    assert not any(v.exists() for v in victims)
    their_file = other / "src" / "calc.py"  # a task worktree
    before = their_file.read_text()
    probe = task_branch(layout, "probe", {"probe.py": f"open({str(their_file)!r}, 'a').write('x')\n"})
    res = integ.merge_task(layout, project(full=f"{PY} probe.py"), "j", probe, "merge probe")
    assert not res.ok and their_file.read_text() == before
    assert git(layout.root, "status", "--porcelain") == ""
    assert integ.merge_task(layout, project(), "j", task_branch(layout, "fine", {"ok.txt": "1\n"}), "m").ok


def test_merge_runs_no_hooks_and_records_the_tip(layout: RepoLayout) -> None:
    hooks = Path(git(layout.root, "rev-parse", "--git-path", "hooks"))
    if not hooks.is_absolute():
        hooks = layout.root / hooks
    hooks.mkdir(parents=True, exist_ok=True)
    for name in ("pre-merge-commit", "post-merge", "post-commit"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {layout.root}/hook-{name}-ran\n")
        (hooks / name).chmod(0o755)
    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    res = integ.merge_task(layout, project(full="true"), "j", branch, "merge t")
    assert res.ok and git(integ.integration_path(layout, "j"), "rev-parse", "HEAD^2") == git(layout.root, "rev-parse", branch)
    assert not list(layout.root.glob("hook-*-ran"))


def test_a_detached_checkout_without_a_base_branch_starts_from_its_head_and_syncs_nothing(layout: RepoLayout) -> None:
    git(layout.root, "checkout", "-q", "--detach")
    cfg = project(full="true")
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    assert git(checkout, "rev-parse", "HEAD") == git(layout.root, "rev-parse", "HEAD")
    assert integ.sync_integration(layout, cfg, "j")["state"] == "up-to-date"
    with pytest.raises(UserError, match="detached HEAD"):
        integ.base_branch(layout, cfg)  # what ship needs: it says so in one line


def test_an_unreadable_pending_marker_is_dropped_and_the_merge_goes_on(layout: RepoLayout) -> None:
    cfg = project(full="true")
    branch = task_branch(layout, "t", {"f.txt": "x\n"})
    marker = integ.pending_file(layout, "j")
    marker.write_text('{"previous_sha": "')  # cut short by a crash mid-write (atomic_write_json never does)
    res = integ.merge_task(layout, cfg, "j", branch, "m")
    assert res.ok and not res.already_merged and not marker.exists()


def test_a_merge_git_refuses_without_conflicts_names_gits_reason(layout: RepoLayout) -> None:
    """A branch with no history in common: git refuses it; the reason is git's last line, rolled back."""
    cfg = project(full="true")
    checkout = integ.ensure_integration_checkout(layout, cfg, "j")
    before = git(checkout, "rev-parse", "HEAD")
    import subprocess

    def piped(text: str, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=layout.root, input=text, check=True, capture_output=True,
                              text=True).stdout.strip()

    blob = piped("elsewhere\n", "hash-object", "-w", "--stdin")
    tree = piped(f"100644 blob {blob}\tother.txt\n", "mktree")
    orphan = git(layout.root, "commit-tree", tree, "-m", "unrelated")
    git(layout.root, "branch", "unrelated", orphan)
    res = integ.merge_task(layout, cfg, "j", "unrelated", "m")
    assert not res.ok and res.conflicts == []
    assert res.reason == f"merge failed: fatal: refusing to merge unrelated histories; rolled back to {before[:10]}"
    assert git(checkout, "rev-parse", "HEAD") == before and git(checkout, "status", "--porcelain") == ""


def test_a_sync_before_anything_else_makes_every_folder_it_needs(layout: RepoLayout) -> None:
    """A job's first step may be the sync, in a data directory with no worktrees folder yet."""
    from pilothouse.core.records.layout import worktrees_base

    assert not worktrees_base().exists()
    res = integ.sync_integration(layout, project(full="true"), "j")
    assert res == {"state": "up-to-date", "head": git(layout.root, "rev-parse", "main")}
    assert (wt.worktree_root(layout) / "integration-j.lock").is_file() and integ.integration_path(layout, "j").is_dir()


def test_a_conflict_in_many_files_names_the_first_five_and_lists_all(layout: RepoLayout) -> None:
    cfg = project(full="true")
    names = [f"f{i}.txt" for i in range(6)]
    a = task_branch(layout, "a", {n: "a\n" for n in names})
    b = task_branch(layout, "b", {n: "b\n" for n in names})
    assert integ.merge_task(layout, cfg, "j", a, "merge a").ok
    before = git(integ.integration_path(layout, "j"), "rev-parse", "HEAD")
    res = integ.merge_task(layout, cfg, "j", b, "merge b")
    assert res.conflicts == names
    assert res.reason == f"merge conflict in f0.txt, f1.txt, f2.txt, f3.txt, f4.txt; rolled back to {before[:10]}"


def _gate_counting(tmp_path: Path, check: str = "true") -> tuple[ProjectConfig, Path]:
    """A full gate that leaves one line per run in a file outside the checkout, then runs `check`."""
    runs = tmp_path / "gate-runs"
    runs.write_text("")
    return project(full=f"echo run >> {runs} && {check}", confinement="off"), runs


def _merges_of(checkout: Path, tip: str) -> int:
    """How many first-parent merges on the integration head bring in `tip`."""
    lines = git(checkout, "log", "--first-parent", "--merges", "--format=%P", "HEAD").splitlines()
    return sum(1 for line in lines if tip in line.split()[1:])


def test_a_train_of_good_branches_merges_them_all_with_one_gate_run(layout: RepoLayout, tmp_path: Path) -> None:
    cfg, runs = _gate_counting(tmp_path)
    branches = [task_branch(layout, f"t{n}", {f"src/t{n}.py": f"N = {n}\n"}) for n in range(4)]
    checkout = integ.integration_path(layout, "j")
    before = git(checkout, "rev-parse", "HEAD")
    results = integ.merge_train(layout, cfg, "j", [(b, f"merge {b}") for b in branches])
    assert [r.ok for r in results] == [True] * 4, results
    assert runs.read_text().count("run") == 1
    # one merge commit each, in order, each on the one before; the last is the head
    assert [r.previous_sha for r in results] == [before] + [r.merged_sha for r in results[:-1]]
    assert git(checkout, "rev-parse", "HEAD") == results[-1].merged_sha
    assert all(_merges_of(checkout, git(layout.root, "rev-parse", b)) == 1 for b in branches)
    assert not integ.pending_file(layout, "j").exists()


def test_a_train_with_one_bad_branch_finds_it_and_merges_the_others(layout: RepoLayout, tmp_path: Path) -> None:
    """The batch's gate fails: the train bisects down to the branch that breaks the check; only that
    one is rolled back, every other branch is merged exactly once."""
    cfg, runs = _gate_counting(tmp_path, CHECK)
    files = {n: {f"src/t{n}.py": f"N = {n}\n"} for n in range(8)}
    files[4] = {"src/calc.py": "def add(a, b):\n    return a - b\n"}  # breaks the project's check
    branches = [task_branch(layout, f"t{n}", f) for n, f in files.items()]
    checkout = integ.integration_path(layout, "j")
    results = integ.merge_train(layout, cfg, "j", [(b, f"merge {b}") for b in branches])
    assert [r.ok for r in results] == [True, True, True, True, False, True, True, True], results
    bad = results[4]
    assert bad.gate is not None and not bad.gate.passed and "after merging ph/j/t4" in (bad.reason or "")
    assert 1 < runs.read_text().count("run") < 8  # bisected, not one gate per branch
    for n, branch in enumerate(branches):
        assert _merges_of(checkout, git(layout.root, "rev-parse", branch)) == (0 if n == 4 else 1)
    assert git(checkout, "rev-parse", "HEAD") == results[7].merged_sha
    assert "return a + b" in (checkout / "src" / "calc.py").read_text()
    assert git(checkout, "status", "--porcelain") == ""
    # the train is idempotent: run again, the good ones are already merged, the bad one fails again
    again = integ.merge_train(layout, cfg, "j", [(b, f"merge {b}") for b in branches])
    assert [r.already_merged for r in again] == [True, True, True, True, False, True, True, True]
    assert all(_merges_of(checkout, git(layout.root, "rev-parse", b)) == (0 if n == 4 else 1)
               for n, b in enumerate(branches))


def test_a_train_leaves_out_a_conflict_and_a_credential_and_merges_the_rest(layout: RepoLayout) -> None:
    from pilothouse.core.git.leaks import SecretInDiff

    cfg = project(full="true")
    a = task_branch(layout, "a", {"src/calc.py": "def add(a, b):\n    return b + a\n"})
    b = task_branch(layout, "b", {"src/calc.py": "def add(a, b):\n    return sum((a, b))\n"})
    # committed by the worker itself (pilothouse's own commit would refuse it)
    path, leak = wt.create_worktree(layout, "j", "leak", "pilothouse/integration/j")
    (path / "cfg.py").write_text("token: ghp_abcdefghijklmnopqrstuvwxyz0123\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "leak")
    c = task_branch(layout, "c", {"src/c.py": "C = 1\n"})
    results = integ.merge_train(layout, cfg, "j", [(x, f"merge {x}") for x in (a, b, leak, c)])
    assert results[0].ok and results[3].ok
    assert not results[1].ok and results[1].conflicts == ["src/calc.py"]
    assert isinstance(results[2], SecretInDiff)
    checkout = integ.integration_path(layout, "j")
    assert git(checkout, "rev-parse", "HEAD") == results[3].merged_sha and not (checkout / "cfg.py").exists()


def test_each_job_merges_on_its_own_line_and_starts_from_the_base_not_another_jobs_work(layout: RepoLayout) -> None:
    cfg = project(full="true")
    a = task_branch(layout, "a", {"a.txt": "a\n"}, base="main")
    assert integ.merge_task(layout, cfg, "j", a, "merge a").ok
    # a second job's line starts from main, without j's merge; its merges never reach j's line
    other = integ.ensure_integration_checkout(layout, cfg, "k")
    assert integ.integration_path(layout, "k") == other != integ.integration_path(layout, "j")
    assert git(other, "rev-parse", "HEAD") == git(layout.root, "rev-parse", "main")
    path, b = wt.create_worktree(layout, "k", "b", "pilothouse/integration/k")
    assert not (path / "a.txt").exists()
    (path / "b.txt").write_text("b\n")
    assert co.commit_all(path, "b: work")
    assert integ.merge_task(layout, cfg, "k", b, "merge b").ok
    assert git(layout.root, "ls-tree", "--name-only", "pilothouse/integration/j", "a.txt", "b.txt") == "a.txt"
    assert git(layout.root, "ls-tree", "--name-only", "pilothouse/integration/k", "a.txt", "b.txt") == "b.txt"
    # the old shared branch in the way of the lines: one line saying what to do
    git(layout.root, "branch", "-m", "pilothouse/integration/k", "keep-k")
    git(layout.root, "worktree", "remove", "--force", str(other))
    git(layout.root, "branch", "old-line", "main")
    cfg2 = project(full="true", integration_branch="old-line")
    with pytest.raises(UserError, match="is in the way of the job lines old-line/k: ship what it holds"):
        integ.ensure_integration_checkout(layout, cfg2, "k")


def test_ship_is_refused_while_the_jobs_own_merge_is_in_flight_and_not_for_another_jobs(layout: RepoLayout) -> None:
    from pilothouse.providers.fsutil import atomic_write_json

    with integ._merge_lock(layout, "j"):  # the supervisor merging or gating on j's line
        with pytest.raises(UserError, match="job j is merging or gating on its integration line right now"):
            with integ.job_line_idle(layout, "j"):
                pass
        with integ.job_line_idle(layout, "k"):  # another job's line is its own
            pass
    atomic_write_json(integ.pending_file(layout, "j"), {"previous_sha": "0" * 40})  # a merge cut short
    with pytest.raises(UserError, match="a merge whose gate never finished"):
        with integ.job_line_idle(layout, "j"):
            pass
