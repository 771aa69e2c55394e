"""Real mail servers on loopback for the email tests (`from mailservers import …`): Debian's Dovecot
as a non-privileged IMAP instance (its own config dir and port, plaintext login on loopback only, a
passwd-file user, a maildir in a temp dir), aiosmtpd receiving what pilothouse sends, and a DKIM
test key whose DNS record a test DNS function answers."""

from __future__ import annotations

import base64
import grp
import imaplib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from support import guard


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + guard(timeout)
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class Dovecot:
    """One Dovecot instance of the test's own; `user`/`password` log in to its INBOX. idle=False
    leaves IDLE out of what it announces, as a server without it would."""

    user, password = "pilot", "dovecot-test-password"

    def __init__(self, idle: bool = True) -> None:
        binary = shutil.which("dovecot") or "/usr/sbin/dovecot"
        if not os.path.exists(binary):
            pytest.fail("dovecot is not installed: scripts/test installs dovecot-imapd")
        # the mail processes run as an ordinary user: as root, `nobody` (Dovecot refuses uid 0 and
        # runs its login processes as dovenull); otherwise the user running the tests
        if os.geteuid() == 0:
            mail_uid, mail_gid = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
            login, internal, group = "dovenull", "dovecot", "dovecot"
        else:
            mail_uid, mail_gid = os.getuid(), os.getgid()
            login = internal = pwd.getpwuid(os.getuid()).pw_name
            group = grp.getgrgid(os.getgid()).gr_name
        # its own dir outside pytest's 0700 tree, so the mail user can reach its maildir
        self.dir = Path(tempfile.mkdtemp(prefix="ph-dovecot-"))
        os.chmod(self.dir, 0o755)
        mail = self.dir / "mail"
        mail.mkdir()
        if os.geteuid() == 0:
            os.chown(mail, mail_uid, mail_gid)
        self.port = free_port()
        (self.dir / "passwd").write_text(f"{self.user}:{{PLAIN}}{self.password}:{mail_uid}:{mail_gid}::{mail}/{self.user}::\n")
        (self.dir / "dovecot.conf").write_text(f"""
base_dir = {self.dir}/run
state_dir = {self.dir}/state
log_path = {self.dir}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
first_valid_uid = {min(mail_uid, 500)}
default_internal_user = {internal}
default_internal_group = {group}
default_login_user = {login}
mail_location = maildir:{mail}/%u
# a mail delivered just as IDLE begins can miss the change notification; look again within a second
mailbox_idle_check_interval = 1 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.dir}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {self.dir}/passwd
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
""" + ("" if idle else "imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE LITERAL+\n"))
        self.proc = subprocess.Popen([binary, "-F", "-c", str(self.dir / "dovecot.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_port(self.port)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"dovecot did not start: {self.log()}") from None

    def log(self) -> str:
        try:
            return (self.dir / "dovecot.log").read_text()[-3000:]
        except OSError:
            return ""

    def append(self, raw: bytes, folder: str = "INBOX") -> None:
        """Deliver a mail into the mailbox (IMAP APPEND), as a mail server would."""
        c = imaplib.IMAP4("127.0.0.1", self.port)
        try:
            c.login(self.user, self.password)
            typ, data = c.append(folder, None, None, raw)
            assert typ == "OK", data
        finally:
            c.logout()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class SmtpSink:
    """aiosmtpd on loopback, keeping every message it receives."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[EmailMessage] = []
        self.port = free_port()
        # called with each message before the server says 250: what happens while a mail is sent
        self.on_data: Any = None
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                msg = message_from_bytes(envelope.content, policy=policy.default)
                if sink.on_data is not None:
                    sink.on_data(msg)
                sink.messages.append(msg)  # type: ignore[arg-type]
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def wait_for(self, pred: Any, timeout: float = 30.0) -> EmailMessage:
        end = time.monotonic() + guard(timeout)
        while time.monotonic() < end:
            for m in list(self.messages):
                if pred(m):
                    return m
            time.sleep(0.02)
        raise AssertionError(f"no such mail arrived; got: {[str(m['Subject']) for m in self.messages]}")

    def stop(self) -> None:
        self.controller.stop()


class DkimKey:
    """A test RSA key for `domain` (selector `test`) and the DNS answer that publishes it."""

    selector = b"test"

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self.private = subprocess.run(["openssl", "genrsa", "2048"], capture_output=True, check=True).stdout
        der = subprocess.run(["openssl", "rsa", "-pubout", "-outform", "DER"], input=self.private,
                             capture_output=True, check=True).stdout
        self.record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)

    def dns(self, name: bytes, timeout: int = 5) -> bytes | None:
        want = b"%s._domainkey.%s." % (self.selector, self.domain.encode())
        return self.record if name in (want, want.rstrip(b".")) else None

    def sign(self, raw: bytes, headers: tuple[bytes, ...] = (b"from", b"to", b"subject", b"message-id", b"date")) -> bytes:
        import dkim

        sig = dkim.sign(raw, self.selector, self.domain.encode(), self.private, include_headers=list(headers))
        return sig + raw


def mail(sender: str, to: str, body: str, *, subject: str = "Re: [pilothouse]", msg_id: str | None = None,
         extra: dict[str, str] | None = None) -> bytes:
    from email.utils import formatdate, make_msgid

    m = EmailMessage()
    for k, v in (extra or {}).items():
        m[k] = v
    m["From"] = sender
    m["To"] = to
    m["Subject"] = subject
    m["Date"] = formatdate()
    m["Message-ID"] = msg_id or make_msgid(domain=sender.split("@")[-1])
    m.set_content(body)
    return m.as_bytes(policy=policy.SMTP)
