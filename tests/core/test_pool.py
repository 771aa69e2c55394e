"""The pool of finished task checkouts, on real git repositories: reuse costs what changed, and a
checkout holding uncommitted work, or one a worker tampered with, is never reused nor removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pilothouse.core.git import checkout as co
from pilothouse.core.git import pool
from pilothouse.core.git import worktrees as wt
from pilothouse.core.records.layout import RepoLayout
from support import git, guard


@pytest.fixture
def layout(git_repo: Path) -> RepoLayout:
    return RepoLayout(git_repo)


def _merged_task(layout: RepoLayout, task: str = "a") -> Path:
    path, _, how = pool.checkout_for(layout, "j", task, "main", keep=4)
    assert how == "new"
    (path / "src" / f"{task}.py").write_text("DONE = True\n")
    (path / "build").mkdir()
    (path / "build" / "out.o").write_bytes(b"\x7fELF")  # a build output nobody committed
    (path / ".gitignore").write_text("build/\n")
    assert co.commit_all(path, f"task {task}")
    return path


def test_a_merged_tasks_checkout_serves_the_next_task_at_its_own_base(layout: RepoLayout) -> None:
    old = _merged_task(layout)
    (old / "build" / "left.txt").write_text("ignored leftovers\n")
    assert pool.release(layout, old, "j", "a", keep=4)
    assert not old.exists() and len(pool.pooled(layout)) == 1
    path, branch, how = pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert how == "pooled"
    assert branch == "ph/j/b" and path == wt.worktree_root(layout) / "j" / "b"
    assert pool.pooled(layout) == []
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "ph/j/b"
    assert git(path, "rev-parse", "HEAD") == git(layout.root, "rev-parse", "main")
    # nothing of the task that had it: neither its commit nor what it left untracked or ignored
    assert not (path / "src" / "a.py").exists() and not (path / "build").exists()
    assert co.checkout_state(path) == (git(layout.root, "rev-parse", "main"), "ph/j/b", [])
    # the next task's checkout is an ordinary task worktree: listed, committed to, removed as usual
    assert [w["task"] for w in wt.list_worktrees(layout)] == ["b"]
    assert git(layout.root, "rev-parse", "ph/j/a")  # the merged task's branch keeps its history


def test_with_an_empty_pool_or_keep_zero_a_new_checkout_is_made(layout: RepoLayout) -> None:
    old = _merged_task(layout)
    assert not pool.release(layout, old, "j", "a", keep=0)
    assert old.is_dir() and pool.pooled(layout) == []
    path, _, _ = pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert (path / "src" / "calc.py").exists() and old.is_dir()


def test_the_pool_keeps_at_most_keep_checkouts(layout: RepoLayout) -> None:
    first, second = _merged_task(layout, "a"), _merged_task(layout, "b")
    assert pool.release(layout, first, "j", "a", keep=1)
    assert not pool.release(layout, second, "j", "b", keep=1)
    assert second.is_dir() and len(pool.pooled(layout)) == 1


def test_a_checkout_with_uncommitted_work_is_never_pooled(layout: RepoLayout) -> None:
    old = _merged_task(layout)
    (old / "src" / "calc.py").write_text("# the operator's fix in progress\n")
    (old / "notes.txt").write_text("untracked, not a cache\n")
    assert not pool.release(layout, old, "j", "a", keep=4)
    assert (old / "notes.txt").read_text() == "untracked, not a cache\n"
    assert git(old, "rev-parse", "--abbrev-ref", "HEAD") == "ph/j/a"  # not even detached
    assert pool.pooled(layout) == []


def test_only_the_tasks_own_checkout_is_pooled(layout: RepoLayout) -> None:
    old = _merged_task(layout)
    assert not pool.release(layout, old, "j", "other", keep=4)  # not that task's branch
    assert not pool.release(layout, layout.root, "j", "a", keep=4)  # the operator's checkout
    assert old.is_dir() and pool.pooled(layout) == []


def test_a_pooled_checkout_that_gained_work_is_never_reused_nor_removed(layout: RepoLayout) -> None:
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    (pooled / "src" / "calc.py").write_text("# someone's edit\n")
    path, _, _ = pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert path.is_dir() and pool.pooled(layout) == [pooled]
    assert (pooled / "src" / "calc.py").read_text() == "# someone's edit\n"


def test_a_pooled_checkout_whose_git_link_was_rewritten_is_never_used(layout: RepoLayout, tmp_path: Path) -> None:
    """A worker rewrote its checkout's .git to name another repository: git run there would work on
    that repository (switch its branch, clean its files)."""
    other = tmp_path / "victim"
    other.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(other)], check=True)
    (other / "tracked.txt").write_text("v1\n")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "victim's history")
    (other / "precious.txt").write_text("untracked and precious\n")
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    (pooled / ".git").write_text(f"gitdir: {other / '.git'}\n")
    path, _, _ = pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert (other / "precious.txt").exists() and not git(other, "branch", "--list", "ph/j/b")
    assert (path / "src" / "calc.py").exists() and pool.pooled(layout) == [pooled]


def test_a_pooled_checkout_pointed_at_the_operators_repository_is_never_used(layout: RepoLayout) -> None:
    """Its .git names the main checkout's own .git and its files match main (so git sees nothing
    uncommitted): switching it would switch the operator's checkout to the task's branch."""
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    (pooled / ".git").write_text(f"gitdir: {layout.root / '.git'}\n")
    for leftover in ("src/a.py", ".gitignore"):
        (pooled / leftover).unlink()
    assert not (pooled / "build").exists()  # ignored files went when it was pooled
    assert co.checkout_state(pooled) is not None and co.checkout_state(pooled)[2] == []
    pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert pool.pooled(layout) == [pooled]


def test_a_checkout_pointed_at_the_operators_repository_is_never_pooled(layout: RepoLayout) -> None:
    """Pooling detaches the checkout's HEAD: through a .git naming the main checkout's .git, that
    would detach the operator's own checkout."""
    import shutil

    old = _merged_task(layout)
    (old / ".git").write_text(f"gitdir: {layout.root / '.git'}\n")
    for leftover in ("src/a.py", ".gitignore"):
        (old / leftover).unlink()
    shutil.rmtree(old / "build")
    assert not pool.release(layout, old, "j", "a", keep=4)
    assert git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert pool.pooled(layout) == []


def test_a_pooled_checkout_whose_git_link_is_a_symlink_is_never_used(layout: RepoLayout) -> None:
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    real = pooled / ".git"
    text = real.read_text()
    real.unlink()
    (pooled / "elsewhere").write_text(text)
    real.symlink_to(pooled / "elsewhere")
    assert not pool.take(layout, wt.worktree_root(layout) / "j" / "b", "ph/j/b", "main")
    assert pool.pooled(layout) == [pooled]


def test_a_branch_that_already_exists_is_not_taken_over(layout: RepoLayout) -> None:
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    git(layout.root, "branch", "ph/j/b")
    with pytest.raises(wt.WorktreeError, match="already exists"):
        pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert len(pool.pooled(layout)) == 1  # untouched, for the next task


def test_a_checkout_is_made_ready_when_pooled_so_taking_it_costs_one_look(layout: RepoLayout) -> None:
    """Switching, cleaning and compacting happen off the next task's path: once pooled, the checkout
    is on the base it was given, holds no ignored file, and its index is path-compressed (version 4)."""
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4, base="main")
    [pooled] = pool.pooled(layout)
    assert co.checkout_state(pooled) == (git(layout.root, "rev-parse", "main"), None, [])
    assert not (pooled / "build").exists() and not (pooled / "src" / "a.py").exists()
    index = Path(git(pooled, "rev-parse", "--git-path", "index"))
    data = (index if index.is_absolute() else pooled / index).read_bytes()
    assert data[:4] == b"DIRC" and int.from_bytes(data[4:8], "big") == 4
    assert b"UNTR" not in data  # no untracked cache: it can miss a file made in the same second


def test_a_tool_cache_that_appeared_in_a_pooled_checkout_is_cleaned_when_taken(layout: RepoLayout) -> None:
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    (pooled / "src" / "__pycache__").mkdir()
    (pooled / "src" / "__pycache__" / "calc.cpython-311.pyc").write_bytes(b"\x00")
    path, _, how = pool.checkout_for(layout, "j", "b", "main", keep=4)
    assert how == "pooled" and not (path / "src" / "__pycache__").exists()
    assert co.checkout_state(path) == (git(layout.root, "rev-parse", "main"), "ph/j/b", [])


def test_a_branch_made_between_the_look_and_the_switch_is_never_moved(layout: RepoLayout) -> None:
    """take() creates the task's branch only where none exists: one made meanwhile (by the operator,
    another supervisor) keeps its commit, and the checkout goes back to the pool unchanged."""
    assert pool.release(layout, _merged_task(layout), "j", "a", keep=4)
    [pooled] = pool.pooled(layout)
    before = git(pooled, "rev-parse", "HEAD")
    git(layout.root, "branch", "ph/j/b", "ph/j/a")
    theirs = git(layout.root, "rev-parse", "ph/j/b")
    assert not pool.take(layout, wt.worktree_root(layout) / "j" / "b", "ph/j/b", "main")
    assert git(layout.root, "rev-parse", "ph/j/b") == theirs
    assert pool.pooled(layout) == [pooled] and git(pooled, "rev-parse", "HEAD") == before
    assert co.checkout_state(pooled) == (before, None, [])


def test_a_job_s_next_task_works_in_the_checkout_its_dependency_merged_from(tmp_path: Path, cli) -> None:
    """On the simulator, with the supervisor: `second` starts after `first` merged, in first's
    pooled checkout (the run.started event says so), and the job is accepted with both merged."""
    import json
    import sys

    import yaml
    from pilothouse.core import demo
    from pilothouse.core.records.project import load_project
    from pilothouse.core.records.taskgraph import save_tasks, validate_tasks

    quick = tmp_path / "quick.yaml"
    quick.write_text((demo._data() / "scenarios" / "demo-recovery.yaml").read_text().replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data.update(gates={"fast": "true", "full": "true"}, worktree_pool=2)
    layout.project_yaml.write_text(yaml.safe_dump(data))
    entries = [{"id": "first", "title": "First", "expected_paths": {"write": ["notes/first.txt"]}},
               {"id": "second", "title": "Second", "depends_on": ["first"], "kind": "DEPENDENT",
                "expected_paths": {"write": ["notes/second.txt"]}}]
    save_tasks(layout, validate_tasks(entries, load_project(layout), job="demo"))
    assert cli("job", "plan-ready", "demo", "--repo", str(layout.root)).returncode == 0
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr
    events = [json.loads(x) for x in layout.events.read_text().splitlines()]
    how = {e["task"]: e["data"].get("checkout") for e in events if e["type"] == "run.started" and e["task"]}
    assert how == {"first": "new", "second": "pooled"}
    states = [e["data"]["to"] for e in events if e["type"] == "task.state" and e["task"] == "second"]
    assert states[-1] == "done"
    assert any(e["type"] == "job.accepted" for e in events)
