"""A run's secrets sealed to the run's own key (core/executor/seal.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cryptography", reason="sealing needs the cryptography package: pip install 'pilothouse[ray]'")

SECRET = "sk-sim-" + "7f3a9c" * 6


def test_the_sealed_key_opens_only_for_its_run() -> None:
    from pilothouse.core.executor.seal import keypair, open_sealed, seal

    private, public = keypair()
    sealed = seal(public, json.dumps({"key": SECRET}).encode(), "run-1")
    assert SECRET.encode() not in sealed
    assert json.loads(open_sealed(private, sealed, "run-1"))["key"] == SECRET
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(private, sealed, "run-2")
    other, _ = keypair()
    with pytest.raises(ValueError, match="do not open"):
        open_sealed(other, sealed, "run-1")
