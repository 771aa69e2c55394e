"""The hub between the supervisor and a cluster's nodes (core/executor/hub.py), with real git: what a
node pushes back reaches the task's worktree as a local worker's uncommitted work, links as links."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pilothouse.core.executor import hub
from pilothouse.core.git.worktrees import GitError
from pilothouse.core.records.layout import RepoLayout
from support import until


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _setup(git_repo: Path, tmp_path: Path) -> tuple[RepoLayout, str, Path, str]:
    layout = RepoLayout(git_repo)
    url = str(git_repo / ".ai" / "hub.git")
    hub.ensure_hub(layout, url)
    base = _git(git_repo, "rev-parse", "HEAD")
    worktree = tmp_path / "wt"
    _git(git_repo, "worktree", "add", "-q", "--detach", str(worktree), base)
    hub.push_base(layout, url, base, "r-1")
    return layout, url, worktree, base


def _node(tmp_path: Path, url: str, run_id: str = "r-1") -> Path:
    """A node's checkout of the run's base, as node.py makes it."""
    checkout = tmp_path / "node"
    _git(tmp_path, "init", "-q", str(checkout))
    _git(checkout, "fetch", "-q", "--depth=1", url, hub.base_ref(run_id))
    _git(checkout, "checkout", "-q", "--detach", "FETCH_HEAD")
    return checkout


def _push(checkout: Path, url: str, run_id: str = "r-1") -> None:
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-qm", "work")
    _git(checkout, "push", "-q", "--force", url, f"HEAD:{hub.result_ref(run_id)}")


def test_the_hub_is_made_once_and_kept_out_of_the_operators_status(git_repo: Path, tmp_path: Path) -> None:
    _setup(git_repo, tmp_path)
    assert (git_repo / ".ai" / "hub.git" / "HEAD").is_file()
    assert _git(git_repo, "status", "--porcelain") == ""


def test_a_nodes_work_lands_unstaged_and_a_link_out_of_the_checkout_stays_a_link(git_repo: Path,
                                                                                 tmp_path: Path) -> None:
    layout, url, worktree, base = _setup(git_repo, tmp_path)
    outside = tmp_path / "operator-secret.txt"
    outside.write_text("the operator's\n")
    checkout = _node(tmp_path, url)
    (checkout / "src" / "new.py").write_text("x = 1\n")
    os.symlink(outside, checkout / "escape")
    (checkout / "README.md").unlink()
    _push(checkout, url)
    sha = hub.fetch_result(layout, url, "r-1")
    assert sha is not None
    hub.apply_result(str(worktree), base, sha)
    assert _git(worktree, "rev-parse", "HEAD") == base
    assert _git(worktree, "diff", "--cached", "--name-only") == ""  # nothing staged: as a local worker leaves it
    assert (worktree / "escape").is_symlink() and os.readlink(worktree / "escape") == str(outside)
    assert (worktree / "src" / "new.py").read_text() == "x = 1\n" and not (worktree / "README.md").exists()
    assert outside.read_text() == "the operator's\n"
    hub.drop_refs(layout, url, "r-1")
    assert _git(git_repo, "for-each-ref", "refs/pilothouse") == ""
    assert _git(Path(url), "for-each-ref") == ""


def test_a_commit_that_does_not_sit_on_the_base_is_refused(git_repo: Path, tmp_path: Path) -> None:
    layout, url, worktree, base = _setup(git_repo, tmp_path)
    checkout = _node(tmp_path, url)
    (checkout / "a.txt").write_text("a\n")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-qm", "one")
    (checkout / "b.txt").write_text("b\n")
    _push(checkout, url)  # two commits on top of the base
    sha = hub.fetch_result(layout, url, "r-1")
    with pytest.raises(GitError, match="does not sit on its base"):
        hub.apply_result(str(worktree), base, str(sha))
    assert _git(worktree, "status", "--porcelain") == ""


def test_a_run_that_pushed_nothing_has_no_result(git_repo: Path, tmp_path: Path) -> None:
    layout, url, _, _ = _setup(git_repo, tmp_path)
    assert hub.fetch_result(layout, url, "r-1") is None


def test_a_relative_hub_is_the_repositorys_and_a_url_is_left_alone(git_repo: Path) -> None:
    from pilothouse.core.records.project import ProjectConfig

    layout = RepoLayout(git_repo)

    def url(hub_setting: str | None) -> str:
        project = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}, "ray": {"hub": hub_setting}})
        return hub.hub_url(layout, project)

    assert url(None) == str(git_repo / ".ai" / "hub.git")
    assert url("hubs/shared.git") == str((git_repo / "hubs" / "shared.git").resolve())
    assert url("/srv/pilothouse/hub.git") == "/srv/pilothouse/hub.git"
    assert url("git@host:team/hub.git") == "git@host:team/hub.git"
    assert url("ssh://host/srv/hub.git") == "ssh://host/srv/hub.git"


@pytest.mark.parametrize("url", ["file:///nonexistent/hub.git", "/proc/hub.git"])
def test_a_hub_that_cannot_take_the_base_is_one_line_naming_ray_hub(git_repo: Path, url: str) -> None:
    from pilothouse.providers.errors import UserError

    layout = RepoLayout(git_repo)
    with pytest.raises(UserError) as refused:
        hub.publish_base(layout, url, _git(git_repo, "rev-parse", "HEAD"), "r-1")
    message = str(refused.value)
    assert message.startswith(f"ray.hub in .ai/project.yaml: the hub {url} cannot take the run's base (")
    assert "\n" not in message and "access rights" not in message


# `git init` writes HEAD before refs/ and objects/; this one leaves a second between the two, so a
# sender that took HEAD for a made hub would push into a half-made one (seen under load as "does not
# appear to be a git repository")
_SLOW_INIT = """#!/bin/bash
for last; do :; done
if [[ " $* " == *" init "* ]]; then
  mkdir -p "$last" && echo 'ref: refs/heads/main' > "$last/HEAD" && sleep 1
fi
exec %s "$@"
"""


@pytest.mark.parametrize("init", ["git's own", "slow"])
def test_the_first_runs_of_a_job_sent_at_once_all_get_their_base_into_a_hub_made_once(
        git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init: str) -> None:
    import shutil
    import threading

    if init == "slow":
        wrapper = tmp_path / "bin" / "git"
        wrapper.parent.mkdir()
        wrapper.write_text(_SLOW_INIT % shutil.which("git"))
        wrapper.chmod(0o755)
        monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    layout = RepoLayout(git_repo)
    url = str(git_repo / ".ai" / "hub.git")
    base = _git(git_repo, "rev-parse", "HEAD")
    start = threading.Barrier(8)
    failed: list[BaseException] = []

    def send(run_id: str) -> None:
        start.wait()
        if init == "slow" and run_id != "r-0":  # the others come once the hub's HEAD shows
            until(lambda: (Path(url) / "HEAD").exists(), "the hub's HEAD", every=0.01)
        try:
            hub.publish_base(layout, url, base, run_id)
        except BaseException as exc:  # noqa: BLE001 - the test names it
            failed.append(exc)

    threads = [threading.Thread(target=send, args=(f"r-{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert len(_git(git_repo, "--git-dir", url, "for-each-ref", "refs/pilothouse/base").splitlines()) == 8
    assert sorted(p.name for p in (git_repo / ".ai").iterdir()) == ["hub.git"]  # nothing left aside


def test_runs_starting_at_once_on_a_fresh_node_each_get_their_checkout(git_repo: Path, tmp_path: Path) -> None:
    import threading

    from pilothouse.core.executor.node import check_out

    layout = RepoLayout(git_repo)
    url = str(git_repo / ".ai" / "hub.git")
    base = _git(git_repo, "rev-parse", "HEAD")
    for n in range(8):
        hub.publish_base(layout, url, base, f"r-{n}")
    repo_dir = tmp_path / "node" / "ns"  # the node's store for the repository is made by the first
    start = threading.Barrier(8)
    failed: list[BaseException] = []

    def run(run_id: str) -> None:
        start.wait()
        try:
            check_out(repo_dir, url, run_id, base, repo_dir / run_id / "checkout")
        except BaseException as exc:  # noqa: BLE001 - the test names it
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(f"r-{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert all(_git(repo_dir / f"r-{n}" / "checkout", "rev-parse", "HEAD") == base for n in range(8))
