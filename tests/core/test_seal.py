"""A run's secrets sealed to the run's own key (core/executor/seal.py), without a cluster: each seal
has a key of its own, opens only for its run and its recipient, and refuses any changed byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

try:
    import cryptography  # noqa: F401
except ImportError:  # the [ray] extra: scripts/test installs it, so a missing one is a broken setup
    pytest.fail("sealing needs the cryptography package: pip install -e '.[dev,ray]' (scripts/test does)",
                pytrace=False)

from pilothouse.core.executor.seal import keypair, open_sealed, seal

SECRET = "sk-sim-" + "7f3a9c" * 6


def test_the_sealed_key_opens_only_for_its_run() -> None:
    private, public = keypair()
    sealed = seal(public, json.dumps({"key": SECRET}).encode(), "run-1")
    assert SECRET.encode() not in sealed
    assert json.loads(open_sealed(private, sealed, "run-1"))["key"] == SECRET
    for other_run in ("run-2", "run-10", "run-", "", "RUN-1"):
        with pytest.raises(ValueError, match="do not open"):
            open_sealed(private, sealed, other_run)
    other, _ = keypair()
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(other, sealed, "run-1")


def test_every_seal_has_a_fresh_ephemeral_key_so_no_keystream_is_used_twice() -> None:
    # one key for every seal, with the fixed nonce, would repeat the keystream: XOR of two sealed
    # secrets would be the XOR of the secrets, and anyone holding two blobs could read both
    private, public = keypair()
    a, b = b"A" * 40, b"B" * 40
    sealed = [seal(public, a, "run-1"), seal(public, a, "run-1"), seal(public, b, "run-1")]
    ephemerals = {s[:32] for s in sealed}
    assert len(ephemerals) == 3 and public not in ephemerals
    assert len({s[32:] for s in sealed}) == 3, "the same secret sealed twice gives the same bytes"
    xor_sealed = bytes(x ^ y for x, y in zip(sealed[0][32:72], sealed[2][32:72], strict=True))
    assert xor_sealed != bytes(x ^ y for x, y in zip(a, b, strict=True))
    assert [open_sealed(private, s, "run-1") for s in sealed] == [a, a, b]
    assert [len(s) for s in sealed] == [32 + 40 + 16] * 3  # ephemeral key, ciphertext, tag


def test_any_changed_or_missing_byte_is_refused() -> None:
    private, public = keypair()
    sealed = seal(public, SECRET.encode(), "run-1")
    for pos in (0, 31, 32, len(sealed) - 17, len(sealed) - 1):
        tampered = bytearray(sealed)
        tampered[pos] ^= 0x01
        with pytest.raises(ValueError, match="do not open"):
            open_sealed(private, bytes(tampered), "run-1")
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(private, sealed + b"\0", "run-1")
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(private, sealed[:-1], "run-1")
    for short in (b"", sealed[:32], sealed[:47]):
        with pytest.raises(ValueError, match="cut short"):
            open_sealed(private, short, "run-1")
    assert open_sealed(private, sealed[:48] + sealed[48:], "run-1") == SECRET.encode()
    empty = seal(public, b"", "run-1")
    assert len(empty) == 48 and open_sealed(private, empty, "run-1") == b""


def test_the_blob_is_the_documented_construction() -> None:
    """X25519 with the ephemeral key in front, HKDF-SHA256 (salt: ephemeral then recipient key),
    ChaCha20-Poly1305 with the run id as associated data: a supervisor and a node of different
    versions must agree on every part."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    private, public = keypair()
    sealed = seal(public, SECRET.encode(), "run-7")
    shared = private.exchange(X25519PublicKey.from_public_bytes(sealed[:32]))
    key = HKDF(algorithm=SHA256(), length=32, salt=sealed[:32] + public,
               info=b"pilothouse run secrets v1").derive(shared)
    assert ChaCha20Poly1305(key).decrypt(bytes(12), sealed[32:], b"run-7") == SECRET.encode()


# run ids are "<second>Z-<8 hex>": two runs started the same second share their first 16 characters,
# and ids may differ anywhere, down to their last character only
_SAME_SECOND = "20261204T231400Z-"


@pytest.mark.parametrize(("own", "other"), [
    (_SAME_SECOND + "0a1b2c3d", _SAME_SECOND + "ffffffff"),
    (_SAME_SECOND + "0a1b2c3d", _SAME_SECOND + "0a1b2c3e"),  # only the last character differs
    (_SAME_SECOND + "0a1b2c3d", _SAME_SECOND + "0a1b2c3"),  # the other is a prefix of its id
    (_SAME_SECOND + "0a1b2c3d", _SAME_SECOND + "0a1b2c3d0"),  # its id is a prefix of the other
    ("r" * 79 + "a", "r" * 79 + "b"),  # the longest valid id, differing in its last character
])
def test_a_blob_opens_only_with_its_own_run_id_however_much_of_it_another_id_shares(own: str, other: str) -> None:
    private, public = keypair()
    for sealed_for, asked_by in ((own, other), (other, own)):
        sealed = seal(public, SECRET.encode(), sealed_for)
        assert open_sealed(private, sealed, sealed_for) == SECRET.encode()
        with pytest.raises(ValueError, match="do not open"):
            open_sealed(private, sealed, asked_by)


_RUN_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."


@settings(max_examples=60, deadline=None)
@given(prefix=st.integers(0, 78).flatmap(lambda n: st.text(_RUN_ID_CHARS, min_size=n, max_size=n)),
       own_tail=st.text(_RUN_ID_CHARS, max_size=2), other_tail=st.text(_RUN_ID_CHARS, max_size=2))
def test_two_run_ids_that_share_any_prefix_never_open_each_others_blob(prefix: str, own_tail: str,
                                                                        other_tail: str) -> None:
    own, other = prefix + own_tail, prefix + other_tail
    assume(own != other and own and other)
    private, public = keypair()
    sealed = seal(public, SECRET.encode(), own)
    assert open_sealed(private, sealed, own) == SECRET.encode()
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(private, sealed, other)
