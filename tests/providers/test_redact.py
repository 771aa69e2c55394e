"""Redaction of configured secrets: raw, JSON-escaped, URL-encoded, split across stream chunks."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from pilothouse.providers.redact import (
    REDACTED,
    Redactor,
    StreamRedactor,
    redactor_for_configured,
    secret_forms,
)

KEY = "sk-canary-0123456789abcdef"
ODD = 'p@ss/w"rd+k\\ey 42'  # a secret whose encoded forms all differ from the raw one


def test_raw_secret_replaced_everywhere_in_text():
    r = Redactor([KEY])
    text = f"Authorization: Bearer {KEY}\nagain {KEY}{KEY}"
    out = r.redact(text)
    assert KEY not in out
    assert out == f"Authorization: Bearer {REDACTED}\nagain {REDACTED}{REDACTED}"


def test_json_escaped_form_is_caught():
    r = Redactor([ODD])
    line = json.dumps({"stderr": f"token={ODD}"})
    assert json.dumps(ODD)[1:-1] in line  # the raw form is not in the JSON text
    out = r.redact(line)
    assert json.dumps(ODD)[1:-1] not in out and REDACTED in out
    assert json.loads(out)["stderr"] == f"token={REDACTED}"


def test_url_encoded_forms_are_caught():
    r = Redactor([ODD])
    for form in (quote(ODD, safe=""), quote(ODD), quote_plus(ODD)):
        out = r.redact(f"GET /v1/models?key={form}&x=1")
        assert form not in out
        assert out == f"GET /v1/models?key={REDACTED}&x=1"


def test_json_with_escaped_slash_and_non_ascii():
    secret = "key/with/slash-é-ünïcode"
    r = Redactor([secret])
    for text in (json.dumps({"k": secret}), json.dumps({"k": secret}, ensure_ascii=False),
                 json.dumps(secret)[1:-1].replace("/", "\\/")):
        assert REDACTED in r.redact(text), text


def test_short_secrets_ignored_with_reason_never_the_value():
    r = Redactor(["abc", "", "  ", KEY])
    assert r.count == 1
    assert len(r.ignored) == 1
    assert "3 characters" in r.ignored[0] and "abc" not in r.ignored[0]
    assert r.redact("abc is fine") == "abc is fine"


def test_longer_key_containing_shorter_key_is_replaced_whole():
    short, long = "abcdef12", "abcdef12-more-stuff"
    r = Redactor([short, long])
    assert r.redact(f"x {long} y {short} z") == f"x {REDACTED} y {REDACTED} z"


def test_no_secrets_is_identity():
    r = Redactor([])
    assert not r
    assert r.redact("anything") == "anything"
    s = StreamRedactor(r)
    assert s.feed("abc") == "abc" and s.flush() == ""


def _stream(r: Redactor, chunks: list[str]) -> str:
    s = StreamRedactor(r)
    return "".join(s.feed(c) for c in chunks) + s.flush()


def test_secret_split_across_chunks_is_caught():
    r = Redactor([KEY])
    text = f"prefix {KEY} middle {KEY}"
    for cut in range(1, len(text)):
        out = _stream(r, [text[:cut], text[cut:]])
        assert out == r.redact(text), cut


def test_one_char_chunks_and_random_chunkings_equal_whole_redaction():
    r = Redactor([KEY, ODD, "abcdef12", "abcdef12-more-stuff"])
    rng = random.Random(7)
    parts = [KEY, json.dumps(ODD)[1:-1], quote(ODD, safe=""), "abcdef12", "abcdef12-more-stuff",
             "abcdef1", "plain text ", "\n", "sk-canary-", "é"]
    for _ in range(200):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(0, 6))))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert _stream(r, chunks) == r.redact(text)
    text = f"a {KEY} b"
    assert _stream(r, list(text)) == r.redact(text)


def test_stream_emits_early_and_holds_only_the_tail():
    r = Redactor([KEY])
    s = StreamRedactor(r)
    emitted = s.feed("x" * 100)
    # everything but (longest form - 1) characters goes out immediately
    assert len(emitted) == 100 - (r.max_len - 1)
    assert s.flush() == "x" * (r.max_len - 1)


def test_redactor_for_configured_tolerates_missing_keys_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "pilothouse.providers.keys", None)  # as before keys.py existed
    r = redactor_for_configured(extra=[KEY])
    assert r.redact(KEY) == REDACTED


def test_redactor_for_configured_covers_every_configured_key():
    from pilothouse.providers import keys

    keys.set_key("sim", "sim-key-0123456789", use_backend="file")
    keys.set_key("glm", "glm-key-abcdefghij", use_backend="file")
    r = redactor_for_configured()
    assert r.redact("a sim-key-0123456789 b glm-key-abcdefghij") == f"a {REDACTED} b {REDACTED}"


def test_a_key_replaced_by_another_of_the_same_length_is_redacted_at_once(cli):
    # the process-wide redactor is kept until the key store changes: a new key of the same length
    # leaves keys.json the same size, and must still be seen
    from pilothouse.providers.redact import configured_redactor

    old, new = "glm-key-first-000000", "glm-key-later-111111"
    assert cli("key", "set", "glm", "--from-stdin", "--backend", "file", input=old + "\n").returncode == 0
    assert configured_redactor().redact(f"a {old} b") == f"a {REDACTED} b"
    assert cli("key", "set", "glm", "--from-stdin", "--backend", "file", input=new + "\n").returncode == 0
    assert configured_redactor().redact(f"a {new} b") == f"a {REDACTED} b"


def test_event_log_redacts_configured_keys_by_default(tmp_path):
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers import keys

    log = EventLog(tmp_path / "events.jsonl")
    log.append("job.created", job="j", data={"request": "no key yet"})
    keys.set_key("glm", "glm-key-for-events-123", use_backend="file")  # set after the first append
    log.append("job.created", job="j", data={"request": "use glm-key-for-events-123 please"})
    text = (tmp_path / "events.jsonl").read_text()
    assert "glm-key-for-events-123" not in text and REDACTED in text


def test_base64_forms_are_caught_at_every_offset_and_in_both_alphabets():
    import base64

    r = Redactor([ODD, KEY])
    for secret in (ODD, KEY):
        for before in ("", "u:", "ab:", "x"):
            for after in ("", "z", "zz"):
                raw = (before + secret + after).encode()
                for enc in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
                    out = r.redact(f"Authorization: Basic {enc}")
                    assert REDACTED in out, (before, after, enc)
    assert r.redact("plain words and QUJD and aGVsbG8=") == "plain words and QUJD and aGVsbG8="


def test_every_form_a_secret_takes_is_known_exactly():
    secret = 'k/é"y+z 12'
    assert secret_forms(secret) == {
        'k/é"y+z 12',                    # raw
        'k/\\u00e9\\"y+z 12',             # JSON, ASCII-only
        'k/é\\"y+z 12',                   # JSON, non-ASCII kept
        'k\\/\\u00e9\\"y+z 12',           # JSON that also escapes "/"
        "k%2F%C3%A9%22y%2Bz%2012",        # URL-encoded, nothing safe
        "k/%C3%A9%22y%2Bz%2012",          # URL-encoded, "/" kept
        "k%2F%C3%A9%22y%2Bz+12",          # form-encoded
        "svw6kieSt6IDEy",                 # base64 of the UTF-8 bytes, at offset 0
        "rL8OpInkreiAxM",                 # at offset 1
        "ay/DqSJ5K3ogMT", "ay_DqSJ5K3ogMT",  # at offset 2, standard and URL-safe alphabets
    }
    r = Redactor([secret])
    assert r.redact('{"k": "k/é\\"y+z 12"}') == '{"k": "[REDACTED]"}'
    # text that only shares a prefix with a form is left alone
    assert r.redact('k/é\\"y+z 1X and k/\\u00e9\\"y+z 1X') == 'k/é\\"y+z 1X and k/\\u00e9\\"y+z 1X'


def test_the_shortest_redacted_secret_has_six_characters():
    r = Redactor(["abcde", "abcdef"])
    assert r.redact("abcde abcdef") == f"abcde {REDACTED}"
    assert r.count == 1
    assert r.ignored == ["secret #1 has 5 characters (< 6) and is not redacted: redacting strings that short "
                         "would mangle ordinary text"]


def test_blank_and_non_text_secrets_do_not_stop_the_ones_after_them():
    r = Redactor(["", "   ", 42, "  realsecret1  "])  # type: ignore[list-item]
    assert r.redact("x realsecret1 y") == f"x {REDACTED} y"
    assert r.ignored == ["secret #3 is not text and is not redacted"]


def test_a_stream_holds_a_short_key_that_a_longer_one_may_still_complete():
    short, long = "abcdef", "abcdefgh"
    r = Redactor([short, long])
    # the hold is the longest form less one: here the base64 form of the long key (10 characters)
    assert r.max_len == max(len(f) for f in secret_forms(long)) == 10
    s = StreamRedactor(r)
    # the short key starts where the held tail begins: it may be the start of the long one
    assert s.feed("X" + short + "g") == ""  # 8 characters, within the hold of 9
    assert s.feed("h") == ""
    assert s.flush() == "X" + REDACTED  # redacted as the long key, not "X" + REDACTED + "gh"
    s = StreamRedactor(r)
    # "!!" after it: the long key cannot complete it any more
    assert s.feed("XY" + short + "!!") + s.flush() == f"XY{REDACTED}!!"


def test_a_stream_emits_as_soon_as_one_character_is_past_the_tail():
    r = Redactor(["abcdef"])
    hold = r.max_len - 1  # the longest form (base64, 8 characters) less one
    assert hold == 7
    s = StreamRedactor(r)
    assert s.feed("1234567") == ""
    assert s.feed("8") == "1"
    assert s.flush() == "2345678"


def test_the_configured_redactor_is_built_once_until_a_key_changes():
    from pilothouse.providers import keys
    from pilothouse.providers.redact import configured_redactor

    keys.set_key("sim", "sim-key-0123456789", use_backend="file")
    first = configured_redactor()
    assert configured_redactor() is first
    keys.set_key("glm", "glm-key-abcdefghij", use_backend="file")
    second = configured_redactor()
    assert second is not first and second.redact("glm-key-abcdefghij") == REDACTED


def _a_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _not_text(path: Path) -> None:
    path.write_bytes(b"\xff\xfe not a key \x80\n")


@pytest.mark.parametrize("break_key", [_a_folder, _not_text])
def test_a_keys_backend_that_fails_stops_the_write_instead_of_writing_unredacted(tmp_path, break_key):
    # the module's promise: a backend that fails is not swallowed (fail closed), so no log line
    # goes out without the keys it could not read being taken out of it
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers import keys

    keys.set_key("glm", "glm-key-abcdefghij", use_backend="file")
    keys.set_key("sim", "sim-key-0123456789", use_backend="file")
    break_key(keys.key_file("sim"))
    with pytest.raises((OSError, ValueError)):
        redactor_for_configured()
    log = tmp_path / "events.jsonl"
    made: list[str] = []
    with pytest.raises((OSError, ValueError)):
        EventLog(log).append("job.created", job="j", data={"request": "use glm-key-abcdefghij please"},
                             commit=lambda: made.append("the change"))
    assert "glm-key-abcdefghij" not in (log.read_text() if log.exists() else "")
    assert made == []  # refused before the change it reports is made: no change left without its event
