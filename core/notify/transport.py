"""The two connections to the mailbox: SMTP to send, IMAP (imapclient) to read.

The password is passed only to the server's login; it never reaches argv, the environment, a log
line or an exception message shown to anyone (errors are reworded without it, see `describe`).
"""

from __future__ import annotations

import ssl
from email.message import EmailMessage
from typing import Any

from pilothouse.core.notify.settings import EmailSettings

TIMEOUT_S = 20.0


def describe(exc: BaseException) -> str:
    """One line for a mail error, with every configured key redacted."""
    from pilothouse.core.notify.compose import clean

    return clean(f"{type(exc).__name__}: {exc}".replace("\n", " "))[:300]


def send(settings: EmailSettings, password: str | None, message: EmailMessage | bytes,
         timeout: float = TIMEOUT_S) -> None:
    import smtplib

    ctx = ssl.create_default_context()
    if settings.smtp_tls == "ssl":
        client: smtplib.SMTP = smtplib.SMTP_SSL(settings.smtp_host, settings.smtp_port, timeout=timeout, context=ctx)
    else:
        client = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout)
    with client:
        client.ehlo()
        if settings.smtp_tls == "starttls":
            client.starttls(context=ctx)
            client.ehlo()
        if password and client.has_extn("auth"):
            client.login(settings.login, password)
        if isinstance(message, bytes):
            from email import message_from_bytes, policy

            message = message_from_bytes(message, policy=policy.SMTP)  # type: ignore[assignment]
        client.send_message(message, from_addr=settings.address, to_addrs=[settings.operator])  # type: ignore[arg-type]


def imap_connect(settings: EmailSettings, password: str | None, timeout: float = TIMEOUT_S) -> Any:
    """A logged-in IMAPClient with the folder selected."""
    from imapclient import IMAPClient

    ctx = ssl.create_default_context()
    client = IMAPClient(settings.imap_host, port=settings.imap_port, ssl=settings.imap_tls == "ssl",
                        ssl_context=ctx, timeout=timeout)
    try:
        if settings.imap_tls == "starttls":
            client.starttls(ctx)
        client.login(settings.login, password or "")
        client.select_folder(settings.imap_folder)
    except BaseException:
        try:
            client.shutdown()
        except Exception:  # the socket may already be gone; the first error is the one to report
            pass
        raise
    return client
