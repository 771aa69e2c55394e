"""The task guard refuses credentials by kind and line, never echoing the value."""

from __future__ import annotations

import pytest
from pilothouse.providers.errors import UserError
from pilothouse.providers.guard import check_task, find_credentials

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize("text, kind", [
    ("use sk-proj-abcdefghijklmnop0123 to call", "sk-"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123", "GitHub"),
    ("aws AKIAABCDEFGHIJKLMNOP here", "AKIA"),
    (PEM, "PEM"),
    ("export GITHUB_TOKEN=abcdefgh12345678", "_TOKEN"),
])
def test_obvious_credentials_refused(text, kind):
    found = find_credentials("line one\n" + text)
    assert found and kind in found[0] and "line 2" in found[0]
    with pytest.raises(UserError) as exc:
        check_task(text)
    assert text.split()[-1] not in str(exc.value) or kind == "PEM"


def test_configured_key_refused_without_showing_it():
    with pytest.raises(UserError) as exc:
        check_task("please use my-own-custom-key-42 for this", ["my-own-custom-key-42"])
    assert "configured provider key" in str(exc.value) and "my-own-custom-key-42" not in str(exc.value)


def test_ordinary_tasks_pass():
    check_task("Add a slugify() helper in src/slug.py; the API_TOKEN env var is read by config.py.\n"
               "Run python -m pytest -q. Mention sk- prefixes in the docs.")


def test_code_that_reads_a_credential_is_not_one():
    for text in ('API_TOKEN = os.environ["API_TOKEN"]', "SECRET_KEY = settings.SECRET_KEY",
                 "DB_PASSWORD: ${{ secrets.DB_PASSWORD }}", "OPENAI_API_KEY=get_key()"):
        assert find_credentials(text) == [], text
    assert find_credentials('OPENAI_API_KEY="abcdefgh12345678"')


def test_a_configured_key_is_found_base64_encoded():
    import base64

    key = "my-own-custom-key-42"
    text = "header: Basic " + base64.b64encode(f"me:{key}".encode()).decode()
    assert find_credentials(text, [key]) == ["a configured provider key on line 1"]
