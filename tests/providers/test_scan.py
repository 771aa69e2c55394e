"""`pilothouse scan-secrets`: finds configured keys (any encoding) and credential shapes, never prints them."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from pilothouse.providers import keys, paths
from pilothouse.providers.scan import scan

KEY = "sk-canary-scan-0123456789"
ODD = 'odd/key"with+chars-42'


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_scan_finds_keys_in_all_forms_and_reports_line(tmp_path):
    root = tmp_path / "runtime"
    _write(root / "events.jsonl", '{"a":1}\n' + json.dumps({"text": f"key {ODD}"}) + "\n")
    _write(root / "url.log", f"line1\nline2\nGET /x?key={quote(ODD, safe='')}\n")
    _write(root / "state.db", b"SQLite format 3\0" + b"\0" * 100 + ODD.encode() + b"\0")
    _write(root / "clean.log", "nothing here\nAPI_KEY=[REDACTED]\n")
    hits, count = scan([root], secrets=[ODD])
    assert count == 4
    where = {(Path(h.path).name, h.line, h.kind) for h in hits}
    assert ("events.jsonl", 2, "configured provider key") in where
    assert ("url.log", 3, "configured provider key") in where
    assert any(name == "state.db" for name, _l, _k in where)
    assert not any(name == "clean.log" for name, _l, _k in where)


def test_scan_finds_credential_shapes(tmp_path):
    _write(tmp_path / "r" / "a.log", "x\nexport GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
                                     "-----BEGIN RSA PRIVATE KEY-----\n")
    hits, _ = scan([tmp_path / "r"], secrets=[])
    kinds = {h.kind for h in hits}
    assert any("GitHub" in k for k in kinds) and any("PEM" in k for k in kinds)
    assert {h.line for h in hits} == {2, 3}


def test_cli_scans_repo_runtime_and_logs_skips_credentials_never_prints_the_key(cli, git_repo):
    keys.set_key("sim", KEY, use_backend="file")
    _write(git_repo / ".ai" / "runtime" / "events.jsonl", json.dumps({"data": {"k": KEY}}) + "\n")
    _write(paths.logs_dir() / "sim" / "r1.stderr.log", f"boom\nAuthorization: Bearer {KEY}\n")
    sandbox = paths.providers_dir() / "sim" / "runs" / "r1"
    _write(sandbox / "home" / "ok.txt", "clean\n")
    (sandbox / "credential").symlink_to(keys.key_file("sim"))  # where the key belongs: not a leak
    _write(paths.providers_dir() / "sim" / "runs" / "r2" / "credential", KEY + "\n")
    res = cli("scan-secrets", str(git_repo))
    assert res.returncode == 1, res.stdout + res.stderr
    assert KEY not in res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert f"{git_repo / '.ai' / 'runtime' / 'events.jsonl'}:1: configured provider key" in lines
    assert f"{paths.logs_dir() / 'sim' / 'r1.stderr.log'}:2: configured provider key" in lines
    assert not any("credential" in line for line in lines)
    as_json = json.loads(cli("scan-secrets", str(git_repo), "--json").stdout)
    assert len(as_json["hits"]) == 2 and KEY not in json.dumps(as_json)


def test_cli_clean_exit_zero(cli, git_repo):
    keys.set_key("sim", KEY, use_backend="file")
    _write(git_repo / ".ai" / "runtime" / "events.jsonl", json.dumps({"data": "[REDACTED]"}) + "\n")
    res = cli("scan-secrets", str(git_repo))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no secrets found" in res.stdout


def test_cli_missing_path_is_a_user_error(cli, tmp_path):
    res = cli("scan-secrets", str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr


def test_cli_scans_job_records_and_the_commits_pilothouse_branches_added(cli, git_repo):
    import base64
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=git_repo, check=True, capture_output=True, text=True).stdout

    keys.set_key("sim", KEY, use_backend="file")
    _write(git_repo / ".ai" / "jobs" / "old.json", json.dumps({"revisions": [{"request": f"use {KEY}"}]}) + "\n")
    git("checkout", "-q", "-b", "ph/demo/one")
    _write(git_repo / "conf" / "a.txt", "x\n" + base64.b64encode(f"me:{KEY}".encode()).decode() + "\n")
    git("add", "conf")
    git("commit", "-qm", "a builder's own commit")
    git("checkout", "-q", "-b", "pilothouse/integration/demo", "main")
    _write(git_repo / "b.txt", f"{KEY}\n")
    git("add", "b.txt")
    git("commit", "-qm", "on the integration branch")
    git("checkout", "-q", "main")
    _write(git_repo / "mine.txt", "operator's own history: not pilothouse's to judge\n")
    res = cli("scan-secrets", str(git_repo), "--json")
    assert res.returncode == 1 and KEY not in res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert sorted(out["branches"]) == ["ph/demo/one", "pilothouse/integration/demo"] and out["commits"] == 2
    where = {(h["path"].split("@")[0] if "@" in h["path"] else Path(h["path"]).name, h["line"]) for h in out["hits"]}
    assert where == {("old.json", 1), ("ph/demo/one", 2), ("pilothouse/integration/demo", 1)}
    assert any(h["path"].endswith(":conf/a.txt") for h in out["hits"])
