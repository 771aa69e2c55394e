"""The email settings (one per user, serving every registered repository): a mailbox of its own
(IMAP and SMTP), its address, the operator's own address and the mail server whose verdicts are
trusted. Kept in `config_dir()/email.json` (0600, written atomically); the mailbox's app password
is in the key store under KEY, like a provider key, so every redactor hides it.

The cockpit's settings screen uses `load`, `validate_draft` and `save` (and `set_password`, `turn_off`)
as the CLI uses `validate`.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any, Literal

from pilothouse.providers import keys, paths
from pilothouse.providers.errors import UserError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

KEY = "notify-email"   # the app password's name in the key store
MAX_SETTINGS = 64 * 1024
TLS_MODES = ("ssl", "starttls", "none")


def settings_file() -> Path:
    return paths.config_dir() / "email.json"


class EmailSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field(description="the mailbox pilothouse sends from and reads replies in")
    operator: str = Field(description="your own address: the only one whose replies are obeyed")
    username: str = Field("", description="the mailbox's login (default: its address)")
    imap_host: str
    imap_port: int = Field(993, ge=1, le=65535)
    imap_tls: Literal["ssl", "starttls", "none"] = "ssl"
    imap_folder: str = "INBOX"
    smtp_host: str
    smtp_port: int = Field(465, ge=1, le=65535)
    smtp_tls: Literal["ssl", "starttls", "none"] = "ssl"
    # the authserv-id of the receiving server whose Authentication-Results header is trusted;
    # empty: only a DKIM signature pilothouse verifies itself counts
    trust_server: str = ""
    poll_s: int = Field(60, ge=5, le=3600, description="how often to look when the server has no IDLE")
    # DKIM public keys given by hand, for a domain whose key is not in DNS (a private domain, an
    # offline setup): domain -> its DKIM record ("v=DKIM1; k=rsa; p=…"), used for every selector
    dkim_keys: dict[str, str] = Field(default_factory=dict)
    enabled_at: str = ""   # problems opened before this are not mailed

    @field_validator("address", "operator")
    @classmethod
    def _address(cls, v: str) -> str:
        from email.utils import parseaddr

        v = v.strip()
        name, addr = parseaddr(v)
        if addr != v or addr.count("@") != 1 or not all(addr.split("@")) or any(c.isspace() for c in addr):
            raise ValueError(f"'{v}' is not a plain address like you@example.com")
        return addr.lower()

    @field_validator("imap_host", "smtp_host", "trust_server", "imap_folder")
    @classmethod
    def _word(cls, v: str) -> str:
        v = v.strip()
        if any(c.isspace() or ord(c) < 32 for c in v):
            raise ValueError(f"'{v}' has a space or control character")
        return v

    @field_validator("dkim_keys")
    @classmethod
    def _dkim_keys(cls, v: dict[str, str]) -> dict[str, str]:
        out = {}
        for domain, record in v.items():
            d = domain.strip().lower().rstrip(".")
            if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)+", d):
                raise ValueError(f"'{domain[:80]}' is not a domain name like example.org")
            if not re.search(r"(^|;)\s*p=[A-Za-z0-9+/=\s]{40,}", record):
                raise ValueError(f"{d}: not a DKIM record with its public key (v=DKIM1; k=rsa; p=…)")
            out[d] = " ".join(record.split())
        return out

    @model_validator(mode="after")
    def _coherent(self) -> EmailSettings:
        if self.address == self.operator:
            raise ValueError("operator: the same as address: pilothouse needs a mailbox of its own, "
                             "apart from yours (else it would read its own mail as your replies)")
        for what in ("imap", "smtp"):
            host, tls = getattr(self, f"{what}_host"), getattr(self, f"{what}_tls")
            if tls == "none" and not is_loopback(host):
                raise ValueError(f"{what}_tls: none sends the password in clear: only for a server on this "
                                 f"machine (127.0.0.1, ::1, localhost), not {host}; use ssl or starttls")
        return self

    @property
    def login(self) -> str:
        return self.username or self.address


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate(data: dict[str, Any], where: str = "email settings") -> EmailSettings:
    """The settings from a dict, or one UserError naming the field and the fix."""
    try:
        return EmailSettings.model_validate(data)
    except ValidationError as exc:
        raise _error(exc.errors()[0], where) from None


def validate_draft(data: dict[str, Any], where: str = "email settings") -> EmailSettings | None:
    """Settings filled in one field at a time (the cockpit's settings screen): the settings once
    complete, None while the only fault is a required field not given yet (`missing` names them),
    else one UserError naming the field that is wrong."""
    try:
        return EmailSettings.model_validate(data)
    except ValidationError as exc:
        wrong = [e for e in exc.errors() if e["type"] != "missing"]
        if wrong:
            raise _error(wrong[0], where) from None
        return None


def missing(data: dict[str, Any]) -> list[str]:
    """The required fields `data` does not give yet."""
    return [name for name, f in EmailSettings.model_fields.items() if f.is_required() and not data.get(name)]


def _error(err: Any, where: str) -> UserError:
    field = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")  # a check of two fields names its own
    return UserError(f"{where}: {field + ': ' if field else ''}{msg}")


def load() -> EmailSettings | None:
    """The saved settings, or None when email is off. A damaged file is one UserError."""
    from pilothouse.providers.userfile import read_text

    path = settings_file()
    try:
        text = read_text(path, str(path), MAX_SETTINGS)
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc}): run `pilothouse notify email setup` again") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object: run `pilothouse notify email setup` again")
    return validate(data, str(path))


def save(settings: EmailSettings) -> Path:
    from pilothouse.providers.fsutil import atomic_write_json, ensure_private_dir

    path = settings_file()
    ensure_private_dir(path.parent)
    atomic_write_json(path, settings.model_dump(), mode=0o600)
    return path


def set_password(password: str, backend: str | None = None) -> str:
    """Store the mailbox's app password in the key store; returns the backend used."""
    return keys.set_key(KEY, password, backend)


def password() -> str | None:
    return keys.get_key(KEY)


def has_password() -> bool:
    """Whether an app password is stored (the cockpit says set / not set, never the password)."""
    return keys.has_key(KEY)


def turn_off() -> bool:
    """Remove the settings and the password; False when email was not set up."""
    # only when one was stored: asking a keyring that is not there would fail `off` on a headless box
    found = keys.has_key(KEY) and keys.remove_key(KEY)
    try:
        settings_file().unlink()
        found = True
    except FileNotFoundError:
        pass
    return found


def dkim_record(text: str, source: str) -> str:
    """A DKIM record from a key file's text: the record itself ("v=DKIM1; k=rsa; p=…", as the
    domain's DNS would publish it) or the signer's PEM public key."""
    text = text.strip()
    if "-----BEGIN PUBLIC KEY-----" in text:
        body = text.split("-----BEGIN PUBLIC KEY-----", 1)[1].split("-----END PUBLIC KEY-----", 1)[0]
        key = "".join(body.split())
        if not key:
            raise UserError(f"{source}: the PEM block holds no key")
        return f"v=DKIM1; k=rsa; p={key}"
    if "-----BEGIN" in text:
        raise UserError(f"{source}: not a public key (a private key or a certificate?): give the PEM "
                        "PUBLIC KEY, or the DKIM record as the domain would publish it")
    return text.strip('"')
