"""A run's secrets, sealed to that run: X25519, HKDF-SHA256, ChaCha20-Poly1305 (`cryptography`).

The run's actor makes a keypair in memory and hands out only its public key; the supervisor seals
the run's secrets to it with a fresh ephemeral key of its own. Ray stores and moves the sealed bytes
(task arguments, logs, spilled objects): only the actor that asked can open them, and only once.
The run id is bound in as associated data, so a blob sealed for one run opens for no other.
"""

from __future__ import annotations

from typing import Any

_INFO = b"pilothouse run secrets v1"
_NONCE = bytes(12)  # every key is derived from a fresh ephemeral key and used once


def keypair() -> tuple[Any, bytes]:
    """(private key, raw public key)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = X25519PrivateKey.generate()
    return private, private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=SHA256(), length=32, salt=ephemeral + recipient, info=_INFO).derive(shared)


def seal(recipient: bytes, plaintext: bytes, run_id: str) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    ephemeral, ephemeral_pub = keypair()
    shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(recipient))
    box = ChaCha20Poly1305(_key(shared, ephemeral_pub, recipient))
    return ephemeral_pub + box.encrypt(_NONCE, plaintext, run_id.encode())


def open_sealed(private: Any, sealed: bytes, run_id: str) -> bytes:
    """The plaintext; raises ValueError when the blob was not sealed to this key for this run."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    if len(sealed) < 32 + 16:
        raise ValueError("the sealed secrets are cut short")
    ephemeral_pub = sealed[:32]
    own = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    shared = private.exchange(X25519PublicKey.from_public_bytes(ephemeral_pub))
    try:
        return ChaCha20Poly1305(_key(shared, ephemeral_pub, own)).decrypt(_NONCE, sealed[32:], run_id.encode())
    except InvalidTag:
        raise ValueError("the sealed secrets do not open with this run's key") from None
