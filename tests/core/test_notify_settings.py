"""The email settings and `pilothouse notify email setup|test|status|off` (core/notify/settings.py,
core/commands/workers/notify.py): per user, written atomically 0600, the app password only in the
key store and never shown; bad input one line naming the field."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from mailservers import Dovecot, SmtpSink
from pilothouse.core.notify import settings
from pilothouse.providers import keys

PASSWORD = "app-pw-9f3c1e77d2"
SETUP = ["notify", "email", "setup", "--address", "pilot@pilothouse.test", "--operator", "Me@Example.org",
         "--imap-host", "127.0.0.1", "--imap-tls", "none", "--smtp-host", "127.0.0.1", "--smtp-tls", "none",
         "--trust-server", "mx.pilothouse.test", "--password-from-stdin", "--backend", "file"]


def test_setup_saves_the_settings_privately_and_the_password_only_in_the_key_store(cli) -> None:
    done = cli(*SETUP, input=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    path = settings.settings_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["operator"] == "me@example.org" and data["enabled_at"]
    assert PASSWORD not in path.read_text()
    assert keys.get_key(settings.KEY) == PASSWORD
    status = cli("notify", "email", "status")
    assert "operator: me@example.org" in status.stdout and "password: stored (file)" in status.stdout
    assert PASSWORD not in status.stdout + status.stderr + done.stdout + done.stderr
    # given again, only what is given changes; the first setup's time stays
    again = cli("notify", "email", "setup", "--poll-s", "30", "--no-password")
    assert again.returncode == 0, again.stderr
    later = json.loads(path.read_text())
    assert later["poll_s"] == 30 and later["enabled_at"] == data["enabled_at"] and later["smtp_host"] == "127.0.0.1"
    off = cli("notify", "email", "off")
    assert off.returncode == 0 and not path.exists() and keys.get_key(settings.KEY) is None
    assert "email: off" in cli("notify", "email", "status").stdout


@pytest.mark.parametrize("change, line", [
    (["--operator", "not an address"], "notify email setup: operator: 'not an address' is not a plain address"),
    (["--operator", "pilot@pilothouse.test"], "notify email setup: operator: the same as address"),
    (["--smtp-host", "smtp.example.net"], "smtp_tls: none sends the password in clear: only for a server on this"),
    (["--imap-port", "0"], "notify email setup: imap_port: Input should be greater than or equal to 1"),
])
def test_bad_settings_are_one_line_naming_the_field(cli, change: list[str], line: str) -> None:
    done = cli(*SETUP, *change, input=PASSWORD + "\n")
    assert done.returncode == 2 and line in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not settings.settings_file().exists() and keys.get_key(settings.KEY) is None


def test_no_keyring_names_the_file_backend_of_this_command(cli) -> None:
    done = cli(*[a for a in SETUP if a not in ("--backend", "file")], input=PASSWORD + "\n",
               env={"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    assert done.returncode == 2 and "`pilothouse notify email setup --backend file`" in done.stderr, done.stderr
    assert not settings.settings_file().exists()


def test_a_damaged_settings_file_is_one_line_with_the_fix(cli) -> None:
    path = settings.settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"address": "pilot@pilothouse.test", "operator": ')
    done = cli("notify", "email", "status")
    assert done.returncode == 2 and f"{path}: not JSON" in done.stderr and "notify email setup" in done.stderr
    path.write_text(json.dumps({"address": "a@b.c", "operator": "d@e.f", "imap_host": "h", "smtp_host": "h",
                                "colour": "red"}))
    done = cli("notify", "email", "status")
    assert done.returncode == 2 and f"{path}: colour: Extra inputs are not permitted" in done.stderr


def test_notify_email_test_sends_a_mail_and_logs_in(cli, tmp_path: Path) -> None:
    dovecot, smtp = Dovecot(), SmtpSink()
    try:
        done = cli("notify", "email", "setup", "--address", "pilot@pilothouse.test", "--operator", "me@example.org",
                   "--username", dovecot.user, "--imap-host", "127.0.0.1", "--imap-port", str(dovecot.port),
                   "--imap-tls", "none", "--smtp-host", "127.0.0.1", "--smtp-port", str(smtp.port),
                   "--smtp-tls", "none", "--password-from-stdin", "--backend", "file",
                   input=dovecot.password + "\n")
        assert done.returncode == 0, done.stderr
        test = cli("notify", "email", "test")
        assert test.returncode == 0, test.stdout + test.stderr
        assert "sent a test mail to me@example.org" in test.stdout and "IDLE (replies are read at once)" in test.stdout
        assert "[pilothouse] test" in str(smtp.wait_for(lambda m: True)["Subject"])
        # a wrong password: the failure is named, the password is not
        cli("notify", "email", "setup", "--password-from-stdin", input="wrong-" + PASSWORD + "\n")
        bad = cli("notify", "email", "test")
        assert bad.returncode == 1 and "AUTHENTICATIONFAILED" in bad.stdout
        assert PASSWORD not in bad.stdout + bad.stderr
    finally:
        smtp.stop()
        dovecot.stop()


def test_a_draft_waits_for_its_required_fields_but_names_a_wrong_one_at_once() -> None:
    from pilothouse.providers.errors import UserError

    draft = {"address": "pilot@pilothouse.test", "smtp_port": "587"}
    assert settings.validate_draft(draft) is None
    assert settings.missing(draft) == ["operator", "imap_host", "smtp_host"]
    with pytest.raises(UserError, match=r"^email settings: smtp_port: Input should be a valid integer"):
        settings.validate_draft({**draft, "smtp_port": "five"})
    with pytest.raises(UserError, match=r"^email settings: operator: 'me' is not a plain address"):
        settings.validate_draft({**draft, "operator": "me"})
    done = settings.validate_draft({**draft, "operator": "me@example.org", "imap_host": "imap.example.net",
                                    "smtp_host": "smtp.example.net"})
    assert done is not None and done.smtp_port == 587 and settings.missing(done.model_dump()) == []
