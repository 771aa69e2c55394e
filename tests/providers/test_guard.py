"""The task guard refuses credentials by kind and line, never echoing the value."""

from __future__ import annotations

import pytest
from pilothouse.providers.errors import UserError
from pilothouse.providers.guard import check_task, check_words, find_credentials

PEM_HEAD = "-----BEGIN RSA PRIVATE KEY-----"
PEM = f"{PEM_HEAD}\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"

# (text, the secret it carries, the kind the guard names)
CREDENTIALS = [
    ("use sk-proj-abcdefghijklmnop0123 to call", "sk-proj-abcdefghijklmnop0123",
     "an OpenAI/Anthropic-style key (sk-…)"),
    ("use sk-ant-abcdefghijklmnop0123 to call", "sk-ant-abcdefghijklmnop0123",
     "an OpenAI/Anthropic-style key (sk-…)"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123 here", "ghp_abcdefghijklmnopqrstuvwxyz0123",
     "a GitHub token (ghp_…)"),
    # OAuth, user-to-server, server-to-server (an Actions GITHUB_TOKEN) and refresh tokens
    *[(f"token {p}_abcdefghijklmnopqrstuvwxyz0123 here", f"{p}_abcdefghijklmnopqrstuvwxyz0123",
       "a GitHub token (ghp_…)") for p in ("gho", "ghu", "ghs", "ghr")],
    ("pat github_pat_11ABCDEFG0123456789_abcdefghij here", "github_pat_11ABCDEFG0123456789_abcdefghij",
     "a GitHub fine-grained token"),
    ("aws AKIAABCDEFGHIJKLMNOP here", "AKIAABCDEFGHIJKLMNOP", "an AWS access key id (AKIA…)"),
    ("aws ASIAABCDEFGHIJKLMNOP here", "ASIAABCDEFGHIJKLMNOP", "an AWS access key id (AKIA…)"),
    (PEM, "MIIEpAIBAAKCAQEA", "a private key (PEM block)"),
    # bot, user, app, refresh and legacy workspace tokens
    *[(f"slack {p}-1234567890-abcdef here", f"{p}-1234567890-abcdef", "a Slack token (xox…)")
      for p in ("xoxb", "xoxp", "xoxa", "xoxr", "xoxs")],
    ("export GITHUB_TOKEN=abcdefgh12345678", "abcdefgh12345678", "a *_TOKEN= / *_KEY= / *_SECRET= assignment"),
    ("OPENAI_API_KEY: 'qwertyuiop123'", "qwertyuiop123", "a *_TOKEN= / *_KEY= / *_SECRET= assignment"),
    ("set APP_SECRET=s3cr3tvalue99 first", "s3cr3tvalue99", "a *_TOKEN= / *_KEY= / *_SECRET= assignment"),
    ("DB_PASSWORD = \"hunter2hunter2\"", "hunter2hunter2", "a *_TOKEN= / *_KEY= / *_SECRET= assignment"),
]


@pytest.mark.parametrize("text, secret, kind", CREDENTIALS)
def test_obvious_credentials_refused(text, secret, kind):
    assert find_credentials("line one\n" + text) == [f"{kind} on line 2"]
    with pytest.raises(UserError) as exc:
        check_task(text)
    message = str(exc.value)
    assert message == (f"the task contains {kind} on line 1; remove the credential (workers never need it: "
                       "the provider key is passed to the worker by pilothouse)")
    assert secret not in message


def test_configured_key_refused_without_showing_it():
    with pytest.raises(UserError) as exc:
        check_task("please use\nmy-own-custom-key-42 for this", ["my-own-custom-key-42"], source="task.md")
    assert str(exc.value).startswith("task.md contains a configured provider key on line 2; ")
    assert "my-own-custom-key-42" not in str(exc.value)


def test_configured_keys_shorter_than_six_characters_are_not_searched():
    # a short "key" (a placeholder such as "x" or "none") would match ordinary words
    assert find_credentials("abcde and x marks the spot", ["abcde", "x", ""]) == []
    assert find_credentials("abcdef", ["abcdef"]) == ["a configured provider key on line 1"]


def test_every_credential_is_reported_once_by_kind_in_order():
    text = "key sk-abcdefghijklmnop0123\nthen AKIAABCDEFGHIJKLMNOP\n" + PEM
    assert find_credentials(text, ["my-own-custom-key-42x"]) == [
        "an OpenAI/Anthropic-style key (sk-…) on line 1",
        "an AWS access key id (AKIA…) on line 2",
        "a private key (PEM block) on line 3",
    ]


@pytest.mark.parametrize("text", [
    "Add a slugify() helper in src/slug.py; the API_TOKEN env var is read by config.py.\n"
    "Run python -m pytest -q. Mention sk- prefixes in the docs.",
    "Set GITHUB_TOKEN=<your token> in CI; the DB_PASSWORD= line stays empty.",
    "Short values are placeholders: APP_SECRET=abc, sk-short, ghp_short, AKIA1234.",
    "Write the BEGIN PUBLIC KEY block parser; desk-abcdefghijklmnopqrstu is a product code.",
])
def test_ordinary_tasks_pass(text):
    assert find_credentials(text) == []
    assert check_task(text) is None


def test_line_numbers_count_a_leading_blank_line():
    assert find_credentials("\nAKIAABCDEFGHIJKLMNOP") == ["an AWS access key id (AKIA…) on line 2"]


def test_the_refusal_names_the_first_credential_found():
    with pytest.raises(UserError) as exc:
        check_task("ghp_abcdefghijklmnopqrstuvwxyz0123\nAKIAABCDEFGHIJKLMNOP\n", ["my-own-custom-key-42"])
    assert "contains a GitHub token (ghp_…) on line 1;" in str(exc.value)
    with pytest.raises(UserError) as exc:
        check_task("ghp_abcdefghijklmnopqrstuvwxyz0123 my-own-custom-key-42", ["my-own-custom-key-42"])
    assert "contains a configured provider key on line 1;" in str(exc.value)


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


def test_a_configured_key_found_many_times_is_reported_once():
    text = "key-42-abcdefg here\nand key-42-abcdefg there\nand again key-42-abcdefg"
    assert find_credentials(text, ["key-42-abcdefg"]) == ["a configured provider key on line 1"]


def test_what_the_operator_types_into_a_job_is_checked_against_every_configured_key(cli):
    assert cli("key", "set", "sim", "--from-stdin", "--backend", "file", input="sk-op-typed-9f8e7d6c5b\n").returncode == 0
    for words, kind in (("retry with sk-op-typed-9f8e7d6c5b please", "a configured provider key"),
                        ("use ghs_abcdefghijklmnopqrstuvwxyz0123", "a GitHub token (ghp_…)")):
        with pytest.raises(UserError) as exc:
            check_words(words, "the hint")
        assert str(exc.value).startswith(f"the hint contains {kind} on line 1; "), str(exc.value)
        assert "sk-op-typed" not in str(exc.value)
    for nothing in (None, "", "fold accents first"):
        check_words(nothing, "the hint")


def test_every_providers_key_is_looked_for_not_only_the_first(cli):
    keys = {"glm": "glm-key-0a1b2c3d4e", "kimi": "kimi-key-5f6a7b8c9d", "deepseek": "deepseek-key-e0f1a2b3"}
    for provider, key in keys.items():
        assert cli("key", "set", provider, "--from-stdin", "--backend", "file", input=key + "\n").returncode == 0
    for provider, key in keys.items():
        assert find_credentials(f"call it with\n{key}", list(keys.values())) == ["a configured provider key on line 2"]
        with pytest.raises(UserError) as exc:
            check_words(f"use the {provider} key {key}", "the hint")
        assert str(exc.value).startswith("the hint contains a configured provider key on line 1; "), provider
        assert key not in str(exc.value)


# every label a private key's armour carries: PKCS#8 plain and encrypted, PKCS#1 RSA, SEC1 EC, DSA,
# OpenSSH's own, and an OpenPGP secret key block
PRIVATE_KEY_LABELS = ["PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY",
                      "DSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK"]


@pytest.mark.parametrize("label", PRIVATE_KEY_LABELS)
def test_a_private_key_is_refused_under_every_label_its_armour_takes(label):
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    block = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"
    assert find_credentials(f"deploy with\n{block}\nthanks") == ["a private key (PEM block) on line 2"]
    with pytest.raises(UserError) as exc:
        check_task(f"deploy with {block}")
    assert "a private key (PEM block) on line 1" in str(exc.value) and body not in str(exc.value)


def test_a_public_key_or_a_certificate_is_not_a_private_key():
    for label in ("PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE", "PGP PUBLIC KEY BLOCK"):
        assert find_credentials(f"-----BEGIN {label}-----\nMIIBIjANBgkqhkiG9w0B\n-----END {label}-----") == []
