"""Provider registry: bundled YAML, user overrides, errors naming file + field + fix, the JSON index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilothouse.providers import paths, provider_index
from pilothouse.providers.errors import UserError
from pilothouse.providers.registry import load_providers

BUNDLED = {"glm", "kimi", "deepseek", "qwen-local", "claude-code", "codex-cli", "opencode-glm", "sim"}


def _user_file(name: str, text: str):
    d = paths.config_dir() / "providers"
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text(text)
    return f


def test_bundled_providers_load_and_validate():
    providers = load_providers()
    assert BUNDLED <= set(providers)
    assert providers["sim"].base_url == "sim:" and providers["sim"].scenario == "explore-basic"
    assert providers["sim"].needs_key is False and providers["sim"].runner == "builtin"
    assert providers["qwen-local"].base_url == "http://127.0.0.1:11434/v1" and not providers["qwen-local"].needs_key
    assert providers["claude-code"].runner == "claude-code"
    assert providers["codex-cli"].runner == "codex"
    assert providers["opencode-glm"].runner == "opencode"


def test_user_override_changes_only_named_fields_and_new_provider_is_added():
    _user_file("glm.yaml", "key: glm\nmodel_id: glm-9\n")
    _user_file("mine.yaml", "key: mine\nprovider_id: me\nmodel_id: m1\nbase_url: http://127.0.0.1:9/v1\n"
                            "display_name: Mine\n")
    providers = load_providers()
    assert providers["glm"].model_id == "glm-9"
    assert providers["glm"].base_url.startswith("https://api.z.ai")
    assert providers["mine"].runner == "builtin"
    # the fast index sees the same (and notices the change)
    assert provider_index.record("glm").model_id == "glm-9"
    _user_file("glm.yaml", "key: glm\nmodel_id: glm-10\n")
    assert provider_index.record("glm").model_id == "glm-10"


@pytest.mark.parametrize("text, words", [
    ("key: glm\nmodle_id: x\n", ["modle_id", "unknown field", "remove it"]),
    ("key: claude\nprovider_id: a\nmodel_id: b\nbase_url: https://x\ndisplay_name: c\n", ["key", "reserved"]),
    ("key: glm\nrunner: aider\n", ["runner", "builtin, opencode, claude-code, codex"]),
    ("key: glm\nbase_url: ftp://x\n", ["base_url", "http(s)"]),
    ("key: glm\nbase_url: \"x\\ny\"\n", ["base_url", "'x\\ny' is not an http(s) URL"]),
    ("key: newone\nmodel_id: x\n", ["missing required field", "provider_id"]),
    ("key: glm\n  bad: [\n", ["invalid YAML", "fix it"]),
    ("- just a list\n", ["expected a mapping"]),
])
def test_bad_user_file_names_file_field_and_fix(text, words):
    f = _user_file("bad.yaml", text)
    with pytest.raises(UserError) as exc:
        load_providers()
    msg = str(exc.value)
    assert str(f) in msg and "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_unknown_provider_lists_known_ones():
    with pytest.raises(UserError) as exc:
        provider_index.record("nope")
    assert "unknown provider 'nope'" in str(exc.value) and "glm" in str(exc.value)


def test_providers_list_cli(cli):
    r = cli("providers", "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = {p["key"]: p for p in json.loads(r.stdout)}
    assert BUNDLED <= set(rows)
    assert rows["sim"]["key_status"] == "not needed" and rows["glm"]["key_status"] == "missing"
    r = cli("providers")
    assert r.returncode == 0 and "sim:" in r.stdout


def test_providers_path_names_the_folder_a_user_file_is_read_from(cli):
    from pilothouse.providers import registry

    r = cli("providers", "path", "--json")
    assert r.returncode == 0, r.stderr
    folders = json.loads(r.stdout)
    assert folders == {"user": str(registry.user_dir()), "user_exists": False,
                       "bundled": str(registry.bundled_dir())}
    # a file put where it says becomes a provider
    Path(folders["user"]).mkdir(parents=True)
    (Path(folders["user"]) / "mine.yaml").write_text(
        "key: mine\nprovider_id: llamacpp\nmodel_id: m\nbase_url: http://127.0.0.1:8080/v1\n"
        "display_name: mine\nneeds_key: false\n")
    assert "mine" in {p["key"] for p in json.loads(cli("providers", "list", "--json").stdout)}
    human = cli("providers", "path").stdout
    assert f"yours:   {folders['user']}\n" in human and f"bundled: {folders['bundled']}" in human


def test_help_and_an_unknown_provider_name_the_providers_folder(cli):
    from pilothouse.providers import registry

    assert "pilothouse providers path" in " ".join(cli("providers", "--help").stdout.split())
    assert "providers path" in " ".join(cli("dispatch", "--help").stdout.split())
    with pytest.raises(UserError) as exc:
        provider_index.record("nope")
    assert f"add your own as nope.yaml in {registry.user_dir()}" in str(exc.value)


def test_the_bundled_local_provider_does_not_promise_that_any_server_works():
    notes = load_providers()["qwen-local"].notes
    assert "Any OpenAI-compatible server" not in notes
    assert "tool_choice auto" in notes and "--jinja" in notes


def test_bad_file_in_cli_is_one_line(cli):
    _user_file("bad.yaml", "key: glm\nwhat: 1\n")
    r = cli("providers", "list")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "bad.yaml" in r.stderr and "what" in r.stderr


def test_a_user_provider_file_that_is_not_utf8_or_a_fifo_is_one_line() -> None:
    import os

    from pilothouse.providers import registry
    from pilothouse.providers.errors import UserError

    folder = registry.user_dir()
    folder.mkdir(parents=True, exist_ok=True)
    bad = folder / "mine.yaml"
    bad.write_bytes(b"key: mine\nmodel_id: caf\xe9\n")
    with pytest.raises(UserError, match=r"mine.yaml: not UTF-8 text \(byte 23\)"):
        registry.load_providers()
    bad.unlink()
    os.mkfifo(bad)
    with pytest.raises(UserError, match="mine.yaml: is a FIFO"):
        registry.load_providers()
