"""Keys: a box with no keyring backend is told so (one paragraph, the fix); the file backend is
explicit, private (0600 in 0700) and remembered; status never shows a key."""

from __future__ import annotations

import json
import os
import stat

from pilothouse.providers import keys, paths

CANARY = "sk-test-canary-0123456789"
NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def test_no_keyring_backend_is_explained_in_one_paragraph(cli):
    r = cli("key", "set", "glm", "--from-stdin", input=CANARY + "\n", env=NO_KEYRING)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "no OS keyring" in r.stderr and "pilothouse key set glm --backend file" in r.stderr
    assert CANARY not in r.stderr + r.stdout
    assert not paths.secrets_dir().exists()  # never a silent fallback to files


def test_file_backend_is_private_and_remembered(cli):
    r = cli("key", "set", "glm", "--from-stdin", "--backend", "file", input=CANARY + "\n", env=NO_KEYRING)
    assert r.returncode == 0, r.stderr
    assert CANARY not in r.stdout + r.stderr
    f = keys.key_file("glm")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.secrets_dir().stat().st_mode) == 0o700
    assert json.loads(keys.state_file().read_text())["backend"] == "file"
    assert keys.get_key("glm") == CANARY
    # the next key goes to the remembered backend without --backend
    r = cli("key", "set", "kimi", "--from-stdin", input="sk-kimi-secret-000000\n", env=NO_KEYRING)
    assert r.returncode == 0, r.stderr
    assert keys.key_file("kimi").exists()
    assert set(keys.configured_secrets()) == {CANARY, "sk-kimi-secret-000000"}
    s = cli("status", "--json", env=NO_KEYRING)
    assert s.returncode == 0, s.stderr
    assert CANARY not in s.stdout
    data = json.loads(s.stdout)
    by_key = {p["key"]: p for p in data["providers"]}
    assert by_key["glm"]["api_key"] == "configured" and by_key["deepseek"]["api_key"] == "missing"
    assert by_key["sim"]["runner_installed"] is True and data["keys"]["backend"] == "file"
    r = cli("key", "remove", "glm", env=NO_KEYRING)
    assert r.returncode == 0 and not keys.key_file("glm").exists()
    assert keys.get_key("glm") is None


def test_status_without_any_key_does_not_touch_keyring(cli):
    r = cli("status", env=NO_KEYRING)
    assert r.returncode == 0, r.stderr
    assert "sim" in r.stdout and "missing" in r.stdout


def test_empty_key_refused(cli):
    r = cli("key", "set", "glm", "--from-stdin", "--backend", "file", input="\n")
    assert r.returncode == 2 and "empty key" in r.stderr


def test_unknown_provider_for_key(cli):
    r = cli("key", "set", "nope", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    assert r.returncode == 2 and "unknown provider 'nope'" in r.stderr
    assert not os.path.exists(paths.secrets_dir() / "nope.key")


def test_status_imports_neither_pydantic_nor_keyring(cli):
    import subprocess
    import sys

    cli("key", "set", "glm", "--from-stdin", "--backend", "file", input=CANARY + "\n")
    cli("providers")  # builds the provider index once, as any earlier command would have
    code = ("import sys, io, contextlib\nfrom pilothouse.core import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    cli.main(['status'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'keyring', 'yaml'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
