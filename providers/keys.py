"""Provider API keys: the OS keyring (service "pilothouse", user = provider key) or, chosen
explicitly, private files (0600 in a 0700 dir under paths.secrets_dir()).

The choice is remembered in config_dir()/keys.json together with the list of providers that have
a key, so `status` can say configured/missing without importing keyring (its backend discovery
costs ~200 ms). keyring is imported only when the keyring backend is actually read or written.
A box with no keyring backend is told so in one paragraph with the fix; we never fall back to
files silently.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError

SERVICE = "pilothouse"
BACKENDS = ("keyring", "file")


class NoKeyringBackend(UserError):
    pass


def _no_backend_message(provider: str = "PROVIDER") -> str:
    return (
        "no OS keyring is available on this machine (the keyring library found no usable backend, "
        "which is normal on a headless or SSH-only box without a Secret Service/D-Bus session); "
        "pilothouse will not fall back to plain files on its own. Either set up a keyring backend "
        "(e.g. gnome-keyring in a D-Bus session, or `pip install keyrings.alt`), or choose private "
        f"files explicitly: `pilothouse key set {provider} --backend file` stores each key in a 0600 "
        f"file in the 0700 directory {paths.secrets_dir()} and remembers that choice in "
        f"{state_file()}."
    )


def state_file() -> Path:
    return paths.config_dir() / "keys.json"


def _state() -> dict[str, Any]:
    try:
        data = json.loads(state_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(data: dict[str, Any]) -> None:
    from pilothouse.providers.fsutil import atomic_write_json, ensure_private_dir

    ensure_private_dir(state_file().parent)
    atomic_write_json(state_file(), data, mode=0o600)


def backend() -> str:
    """The remembered backend ("keyring" until the user chose "file")."""
    b = _state().get("backend")
    return b if b in BACKENDS else "keyring"


def configured_providers() -> list[str]:
    """Providers with a key, from the index (no keyring import)."""
    st = _state()
    names = [n for n in st.get("configured", []) if isinstance(n, str)]
    if st.get("backend") == "file":
        # the files are the truth for the file backend; the index only speeds up keyring
        names = [n for n in names if key_file(n).exists()]
    return names


def key_file(provider: str) -> Path:
    if "/" in provider or provider.startswith("."):
        raise UserError(f"'{provider}' is not a provider key")
    return paths.secrets_dir() / f"{provider}.key"


def _keyring() -> Any:
    import keyring  # lazy: backend discovery is slow
    from keyring.backends import chainer, fail

    kr = keyring.get_keyring()
    if isinstance(kr, fail.Keyring) or (isinstance(kr, chainer.ChainerBackend) and not kr.backends):
        raise NoKeyringBackend(_no_backend_message())
    return keyring


def set_key(provider: str, value: str, use_backend: str | None = None) -> str:
    """Store a key; returns the backend used. `use_backend` is remembered for later keys."""
    value = value.strip()
    if not value:
        raise UserError(f"empty key for '{provider}'; paste the key (it is not echoed) or pipe it with --from-stdin")
    if any(c in value for c in "\r\n\0"):
        raise UserError(f"the key for '{provider}' contains a line break; pass exactly one line")
    st = _state()
    chosen = use_backend or backend()
    if chosen not in BACKENDS:
        raise UserError(f"unknown key backend '{chosen}'; use keyring or file")
    if chosen == "file":
        from pilothouse.providers.fsutil import ensure_private_dir

        ensure_private_dir(paths.secrets_dir())
        path = key_file(provider)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
        os.replace(tmp, path)
    else:
        kr = _keyring()
        kr.set_password(SERVICE, provider, value)
    configured = [n for n in st.get("configured", []) if n != provider] + [provider]
    _save_state({**st, "backend": chosen, "configured": sorted(configured)})
    return chosen


def remove_key(provider: str) -> bool:
    """Delete a key from the remembered backend; False when there was none."""
    st = _state()
    found = False
    if backend() == "file":
        try:
            key_file(provider).unlink()
            found = True
        except FileNotFoundError:
            pass
    else:
        kr = _keyring()
        try:
            kr.delete_password(SERVICE, provider)
            found = True
        except Exception:  # keyring.errors.PasswordDeleteError: nothing stored
            found = False
    if provider in st.get("configured", []):
        st["configured"] = [n for n in st["configured"] if n != provider]
        _save_state(st)
        found = True
    return found


def get_key(provider: str) -> str | None:
    """The key, or None when none is configured. Raises NoKeyringBackend only when the index says
    a key was stored in a keyring that is no longer reachable."""
    st = _state()
    if backend() == "file":
        try:
            return key_file(provider).read_text().strip() or None
        except FileNotFoundError:
            return None
    if provider not in st.get("configured", []):
        return None  # nothing was ever stored for it: no need to wake the keyring
    return _keyring().get_password(SERVICE, provider)


def has_key(provider: str) -> bool:
    return provider in configured_providers()


def configured_secrets() -> list[str]:
    """Every configured key of every provider (what redaction must hide). Never raises."""
    out = []
    for name in configured_providers():
        try:
            value = get_key(name)
        except UserError:
            continue
        if value:
            out.append(value)
    return out
