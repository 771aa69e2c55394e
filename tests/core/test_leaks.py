"""Secrets stop at the commit: a builder that writes its own credential into a file gets no commit,
its task stops with a problem that names the place and never the key, and a hint fixes it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pilothouse.core import demo
from pilothouse.core.git.checkout import commit_all
from pilothouse.core.git.leaks import SecretInDiff, check_branch, check_staged
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import answering, problems
from pilothouse.providers.errors import UserError
from pilothouse.providers.redact import secret_forms
from support import guard

CANARY = "sk-canary-leak-5e4d3c2b1a09"

LEAK = """
name: leak
description: the builder copies its own credential into the repository, then takes it out on a hint
scripts:
  - match: {mode: plan}
    turns:
      - say: |
          <!--RESULT-->{"tasks":[{"id":"one","title":"One","kind":"SAFE_PARALLEL","expected_paths":{"write":["conf/"]}}]}<!--/RESULT-->
  - match: {mode: code}
    turns:
      - say: "Saving the settings"
        actions:
          - bash: {command: "mkdir -p conf && echo 'name = demo' > conf/app.txt && cat \\"$HOME/../credential\\" > conf/key.txt && base64 -w0 \\"$HOME/../credential\\" > conf/key.b64"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["conf/app.txt","conf/key.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
      - say: "Taking the key out"
        actions:
          - bash: {command: "rm conf/key.txt conf/key.b64"}
      - say: |
          <!--RESULT-->{"status":"complete","files_changed":["conf/app.txt"],"validation":{"commands":[],"passed":true},"risks":[]}<!--/RESULT-->
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _quick(layout: RepoLayout) -> None:
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))


def _once(layout: RepoLayout) -> None:
    done = subprocess.run([sys.executable, "-m", "pilothouse.core.supervisor.loop", "--repo", str(layout.root),
                           "--once"], capture_output=True, text=True, timeout=guard(180))
    assert done.returncode == 0, done.stderr


def _every_commit(root: Path) -> bytes:
    """Every commit on every branch, as patches with their messages and file names."""
    return subprocess.run(["git", "log", "--all", "-p", "--text", "--format=%H %B"], cwd=root, check=True,
                          capture_output=True).stdout


def test_a_builder_that_writes_its_credential_gets_no_commit_and_a_hint_fixes_it(tmp_path: Path, cli) -> None:
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    scenario = tmp_path / "leak.yaml"
    scenario.write_text(LEAK)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick(layout)
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    assert p.task, p.summary
    assert (p.task, p.kind, p.replies) == ("one", "secret_found", ["hint", "retry", "skip", "plan"])
    assert "conf/key.b64 line 1" in p.summary or "conf/key.txt line 1" in p.summary
    assert "nothing was committed" in p.summary and "\n" not in p.summary
    assert {"conf/key.txt:1: configured provider key", "conf/key.b64:1: configured provider key"} <= set(
        p.evidence["places"])
    record = json.dumps(p.as_dict()) + layout.events.read_text()
    forms = secret_forms(CANARY)
    assert not any(f in record for f in forms)
    # the work is left in the worktree (unstaged) for the operator to see; no branch holds it
    wt = Path(p.evidence["worktree"])
    assert (wt / "conf" / "key.txt").read_text().strip() == CANARY
    assert not any(f.encode() in _every_commit(layout.root) for f in forms)

    answering.act(layout, p.code, "hint", "never write the key into the repository: remove conf/key.*")
    _once(layout)
    left = problems.list_problems(layout, True, job="demo")
    assert left == [], [q.summary for q in left]
    assert _git(layout.root, "show", "pilothouse/integration/demo:conf/app.txt") == "name = demo"
    assert not any(f.encode() in _every_commit(layout.root) for f in forms)


def test_the_scan_catches_base64_forms_and_shapes_but_not_code_that_reads_a_key(
        tmp_path: Path, git_repo: Path, cli) -> None:
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    clean = 'API_TOKEN = os.environ["API_TOKEN"]\nSECRET_KEY = settings.SECRET_KEY\n'
    (git_repo / "ok.py").write_text(clean)
    _git(git_repo, "add", "-A")
    check_staged(git_repo, "the work")  # reading a key from the environment is no leak
    _git(git_repo, "commit", "-qm", "ok")
    for name, text in (("basic.txt", "Authorization: Basic "
                        + base64.b64encode(f"user:{CANARY}".encode()).decode() + "\n"),
                       ("gh.txt", "one\ntwo\ntoken: ghp_abcdefghijklmnopqrstuvwxyz0123\n")):
        _git(git_repo, "checkout", "-q", "-B", f"b-{name}", "main")
        (git_repo / name).write_text(text)
        _git(git_repo, "add", "-A")
        try:
            check_staged(git_repo, "the work")
        except SecretInDiff as exc:
            assert CANARY not in str(exc) and name in str(exc)
        else:
            raise AssertionError(f"{name}: not caught")
        _git(git_repo, "commit", "-qm", name)
        try:
            check_branch(git_repo, "main", f"b-{name}")
        except SecretInDiff as exc:
            assert str(exc).endswith("nothing was merged") and name in str(exc)
        else:
            raise AssertionError(f"{name}: not caught on the branch")


def test_a_retry_commits_the_operators_cleaned_worktree_only_once_no_key_is_left(tmp_path: Path, cli) -> None:
    r = cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    scenario = tmp_path / "leak.yaml"
    scenario.write_text(LEAK)
    layout = demo.prepare(tmp_path / "repo", str(scenario))
    _quick(layout)
    _once(layout)
    [p] = problems.list_problems(layout, True, job="demo")
    wt = Path(p.evidence["worktree"])
    (wt / "conf" / "key.txt").unlink()  # the operator misses the base64 copy
    answering.act(layout, p.code, "retry")
    _once(layout)
    [again] = problems.list_problems(layout, True, job="demo")
    assert again.kind == "secret_found" and "your retry could not be applied" in again.summary
    assert "the worktree holds a configured provider key in conf/key.b64 line 1" in again.summary
    assert CANARY not in again.summary
    (wt / "conf" / "key.b64").unlink()
    answering.act(layout, again.code, "retry")
    _once(layout)
    assert problems.list_problems(layout, True, job="demo") == []
    assert _git(layout.root, "show", "pilothouse/integration/demo:conf/app.txt") == "name = demo"
    assert not any(f.encode() in _every_commit(layout.root) for f in secret_forms(CANARY))


def test_a_marked_line_lets_a_fake_token_through_but_never_a_configured_key(git_repo: Path, cli) -> None:
    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input=CANARY + "\n").returncode == 0
    (git_repo / "fixture.py").write_text('FAKE = "ghp_abcdefghijklmnopqrstuvwxyz0123"  # pilothouse:allow-secret\n')
    _git(git_repo, "add", "-A")
    check_staged(git_repo, "the work")
    (git_repo / "fixture.py").write_text(f'KEY = "{CANARY}"  # pilothouse:allow-secret\n')
    _git(git_repo, "add", "-A")
    try:
        check_staged(git_repo, "the work")
    except SecretInDiff as exc:
        assert [h.kind for h in exc.hits] == ["configured provider key"]
    else:
        raise AssertionError("a configured key went through")


def _refused_commit(repo: Path, name: str, text: str) -> SecretInDiff:
    """commit_all of `text` in `name`: the SecretInDiff it raised; no commit made, the file left unstaged."""
    before = _git(repo, "rev-parse", "HEAD")
    (repo / name).write_text(text)
    try:
        commit_all(repo, "the work")
    except SecretInDiff as exc:
        assert _git(repo, "rev-parse", "HEAD") == before and _git(repo, "diff", "--cached", "--name-only") == ""
        assert (repo / name).read_text() == text
        return exc
    raise AssertionError(f"{name}: committed as {_git(repo, 'rev-parse', 'HEAD')}")


@pytest.mark.parametrize("line", ['DB_PASSWORD = "hunter2hunter2"\n', "export DEPLOY_TOKEN=abcdefgh12345678\n",
                                  "SMTP_PASSWORD: s3cr3tvalue99\n", "APP_SECRET='qwertyuiop123'\n",
                                  "STRIPE_API_KEY=rk_live_0123456789\n"])
def test_a_literal_password_or_token_assignment_gets_no_commit(git_repo: Path, line: str) -> None:
    exc = _refused_commit(git_repo, "settings.env", "name = demo\n" + line)
    assert [(h.path, h.line, h.kind) for h in exc.hits] == [
        ("settings.env", 2, "a *_TOKEN= / *_KEY= / *_SECRET= assignment")]
    assert line.split("=")[-1].split(":")[-1].strip(" '\"\n") not in str(exc)


@pytest.mark.parametrize("token", ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"])
def test_every_kind_of_github_token_gets_no_commit(git_repo: Path, token: str) -> None:
    exc = _refused_commit(git_repo, "ci.yml", f"env:\n  TOKEN: {token}abcdefghijklmnopqrstuvwxyz0123\n")
    assert [h.kind for h in exc.hits] == ["a GitHub token (ghp_…)"]


def test_a_file_marked_binary_in_gitattributes_is_scanned_as_text(git_repo: Path) -> None:
    # the worker writes the attributes too: `-diff` would make git print "Binary files differ"
    (git_repo / ".gitattributes").write_text("*.cfg -diff\nsecret.dat binary\n")
    exc = _refused_commit(git_repo, "deploy.cfg", "host = example.org\ntoken ghs_abcdefghijklmnopqrstuvwxyz0123\n")
    assert [(h.path, h.line) for h in exc.hits] == [("deploy.cfg", 2)]
    (git_repo / "deploy.cfg").unlink()
    exc = _refused_commit(git_repo, "secret.dat", "DB_PASSWORD=hunter2hunter2\n")
    assert [(h.path, h.line) for h in exc.hits] == [("secret.dat", 1)]


def test_work_whose_diff_git_cannot_make_is_not_committed(git_repo: Path) -> None:
    # a worker that switches its worktree to an orphan branch leaves no HEAD to diff against:
    # the scan cannot run, so nothing is committed (fail closed), secret or not
    _git(git_repo, "checkout", "-q", "--orphan", "loose")
    (git_repo / "key.txt").write_text("token ghp_abcdefghijklmnopqrstuvwxyz0123\n")
    with pytest.raises(UserError) as exc:
        commit_all(git_repo, "the work")
    assert "cannot scan the changes" in str(exc.value) and "git diff --cached failed" in str(exc.value)
    assert subprocess.run(["git", "rev-parse", "-q", "--verify", "refs/heads/loose"], cwd=git_repo,
                          capture_output=True).returncode != 0, "a commit was made"


def test_the_refusal_names_the_first_place_and_counts_the_others(git_repo: Path) -> None:
    exc = _refused_commit(git_repo, "tokens.txt", "".join(f"t{i} ghp_abcdefghijklmnopqrstuvwxyz012{i}\n"
                                                          for i in range(4)))
    assert str(exc).endswith("in tokens.txt line 1 (and 3 more); nothing was committed"), str(exc)
    (git_repo / "tokens.txt").unlink()
    one = _refused_commit(git_repo, "one.txt", "ghp_abcdefghijklmnopqrstuvwxyz0123\n")
    assert str(one).endswith("in one.txt line 1; nothing was committed"), str(one)
