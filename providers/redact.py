"""Redaction of configured secrets from everything pilothouse writes or shows.

Every configured key (all providers) of at least MIN_SECRET_LEN characters is replaced by
REDACTED, in its raw form and in the forms it takes once it passes through a JSON encoder, a
URL or base64: a worker that echoes its Authorization header into a tool result, a JSON log line
that escapes a `/` or `"` inside a key, or a `Basic` header or config blob that base64-encodes it,
must not leak it either.

Shorter secrets are not redacted — replacing every 3-letter string that happens to be a key
would shred logs without protecting anything — and the reason is kept in Redactor.ignored
(never the value itself).

StreamRedactor applies the same rule to text that arrives in chunks (a worker's stdout): it
holds back just enough of the tail that a secret split across two chunks is still caught, and
its output is byte-for-byte what Redactor.redact would give for the whole text.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 6


def base64_forms(secret: str) -> set[str]:
    """The base64 text that encodes `secret` wherever it sits in the encoded bytes.

    base64 works in 3-byte groups, so the key's encoding depends on how many bytes come before it
    (0, 1 or 2 modulo 3). For each offset we keep only the characters that encode key bytes alone:
    the first characters also carry the preceding bytes and the last one the following bytes,
    and those are dropped, so `user:KEY` in a Basic header is caught as surely as KEY alone.
    Standard and URL-safe alphabets both.
    """
    import base64

    raw = secret.encode("utf-8")
    forms: set[str] = set()
    for offset, skip in ((0, 0), (1, 2), (2, 3)):
        total = offset + len(raw)
        enc = base64.b64encode(b"\0" * offset + raw).decode("ascii").rstrip("=")
        core = enc[skip:len(enc) - (1 if total % 3 else 0)]
        if len(core) >= MIN_SECRET_LEN:
            forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


def secret_forms(secret: str) -> set[str]:
    """The spellings a secret can take in text pilothouse writes: raw, JSON-escaped, URL-encoded,
    base64."""
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
        quote(secret),  # default safe="/" as most HTTP clients encode path/query parts
        quote_plus(secret),
    }
    # JSON encoders that also escape "/" (some do, e.g. for HTML-safety)
    forms.add(json.dumps(secret)[1:-1].replace("/", "\\/"))
    forms |= base64_forms(secret)
    return {f for f in forms if f}


class Redactor:
    """Replaces every configured secret (len >= MIN_SECRET_LEN) and its encoded forms by REDACTED."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.ignored: list[str] = []
        kept: set[str] = set()
        for n, secret in enumerate(secrets, 1):
            if not isinstance(secret, str):
                self.ignored.append(f"secret #{n} is not text and is not redacted")
                continue
            secret = secret.strip()
            if not secret:
                continue
            if len(secret) < MIN_SECRET_LEN:
                self.ignored.append(
                    f"secret #{n} has {len(secret)} characters (< {MIN_SECRET_LEN}) and is not redacted: "
                    "redacting strings that short would mangle ordinary text"
                )
                continue
            kept.add(secret)
        forms: set[str] = set()
        for secret in kept:
            forms |= secret_forms(secret)
        # longest first, so a key that contains another key is replaced whole
        self._forms = sorted(forms, key=lambda f: (-len(f), f))
        self.count = len(kept)
        self.max_len = max((len(f) for f in self._forms), default=0)
        self._pattern: re.Pattern[str] | None = (
            re.compile("|".join(re.escape(f) for f in self._forms)) if self._forms else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    @property
    def forms(self) -> list[str]:
        """Every spelling that is replaced, longest first."""
        return list(self._forms)

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def finditer(self, text: str) -> Iterable[re.Match[str]]:
        if self._pattern is None:
            return iter(())
        return self._pattern.finditer(text)

    def __call__(self, text: str) -> str:
        return self.redact(text)


class StreamRedactor:
    """Redacts text that arrives in chunks; a secret split across chunks is still caught.

    feed() returns the text that is safe to emit now; flush() returns the rest at the end of the
    stream. Holding back (longest form − 1) characters is enough: any secret that could still
    complete with the next chunk starts within that tail.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._hold = max(redactor.max_len - 1, 0)
        self._buf = ""

    def feed(self, chunk: str) -> str:
        if not chunk:
            return ""
        if not self.redactor:
            return chunk
        self._buf += chunk
        buf = self._buf
        boundary = len(buf) - self._hold
        if boundary <= 0:
            return ""
        out: list[str] = []
        pos = 0
        for match in self.redactor.finditer(buf):
            if match.start() >= boundary:
                # may be the prefix of a longer secret that the next chunk completes
                break
            out.append(buf[pos:match.start()])
            out.append(REDACTED)
            pos = match.end()
        cut = max(pos, boundary)
        out.append(buf[pos:cut])
        self._buf = buf[cut:]
        return "".join(out)

    def flush(self) -> str:
        rest, self._buf = self._buf, ""
        return self.redactor.redact(rest)


def configured_secrets_or_empty() -> list[str]:
    """Every configured key, or [] while providers.keys is not there.

    A keys backend that fails is not swallowed: logging without redaction would be worse than
    stopping (fail closed).
    """
    import importlib

    try:
        keys = importlib.import_module("pilothouse.providers.keys")
    except ImportError:
        return []
    getter = getattr(keys, "configured_secrets", None)
    if getter is None:
        return []
    return [s for s in getter() if s]


def redactor_for_configured(extra: Iterable[str] = ()) -> Redactor:
    """A Redactor for every key configured for any provider (plus `extra`, e.g. a run's own key)."""
    return Redactor([*configured_secrets_or_empty(), *extra])


_cached: tuple[object, Redactor] | None = None


def configured_redactor() -> Redactor:
    """A process-wide redactor_for_configured(), rebuilt when a key is set or removed.

    For writers that append often (events): building one reads every key (the keyring can cost
    ~0.2 s), so it is kept until keys.json — which every `key set/remove` rewrites — changes.
    """
    global _cached
    import importlib

    try:
        keys = importlib.import_module("pilothouse.providers.keys")
        st = os.stat(keys.state_file())
        stamp: object = (st.st_mtime_ns, st.st_size, st.st_ino)
    except (ImportError, AttributeError, OSError):
        stamp = None
    if _cached is None or _cached[0] != stamp:
        _cached = (stamp, redactor_for_configured())
    return _cached[1]

