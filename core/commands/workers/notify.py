"""CLI: problems by email (docs/email.md).

    pilothouse notify email setup --address A --operator O --imap-host H --smtp-host H [...]
    pilothouse notify email test | status | start | stop | off | watch [--detach]
"""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

# option -> settings field
_FIELDS = {"address": "address", "operator": "operator", "username": "username", "imap_host": "imap_host",
           "imap_port": "imap_port", "imap_tls": "imap_tls", "folder": "imap_folder", "smtp_host": "smtp_host",
           "smtp_port": "smtp_port", "smtp_tls": "smtp_tls", "trust_server": "trust_server", "poll_s": "poll_s"}


def register(sub: Any) -> None:
    p = sub.add_parser("notify", help="answer problems by email: one mail per problem, replies obeyed from you")
    kinds = p.add_subparsers(dest="notify_kind", metavar="KIND", required=True)
    e = kinds.add_parser("email", help="the email channel (setup, test, status, start, stop, off, watch)")
    actions = e.add_subparsers(dest="email_action", metavar="ACTION", required=True)
    s = actions.add_parser("setup", help="save the mailbox settings and its app password",
                           description="A mailbox of pilothouse's own sends one mail per new problem and "
                                       "receives your replies. Given again, changes only the options given.")
    s.add_argument("--address", help="the mailbox pilothouse uses (not your own)")
    s.add_argument("--operator", help="your own address: the only one whose replies are obeyed")
    s.add_argument("--username", help="the mailbox's login (default: its address)")
    s.add_argument("--imap-host")
    s.add_argument("--imap-port", type=int)
    s.add_argument("--imap-tls", choices=("ssl", "starttls", "none"))
    s.add_argument("--folder", help="the folder replies arrive in (default INBOX)")
    s.add_argument("--smtp-host")
    s.add_argument("--smtp-port", type=int)
    s.add_argument("--smtp-tls", choices=("ssl", "starttls", "none"))
    s.add_argument("--trust-server", metavar="AUTHSERV_ID",
                   help="the receiving server whose Authentication-Results header is trusted (its authserv-id)")
    s.add_argument("--poll-s", type=int, help="seconds between looks where the server has no IDLE (default 60)")
    s.add_argument("--dkim-key", action="append", metavar="DOMAIN=FILE", default=[],
                   help="the DKIM public key of DOMAIN (a PEM public key, or its DKIM record) for a domain "
                        "whose key is not in DNS; DOMAIN= alone forgets it (repeatable)")
    s.add_argument("--password-from-stdin", action="store_true", help="read the app password from stdin's first line")
    s.add_argument("--no-password", action="store_true", help="keep the stored password (or set none)")
    s.add_argument("--backend", choices=("keyring", "file"), help="where the key store keeps it (remembered)")
    s.set_defaults(func=_setup)
    for name, func, help_ in (("test", _test, "send yourself a test mail and log in to the mailbox"),
                              ("status", _status, "the settings (never the password), the watcher, the outbox"),
                              ("start", _start, "start the watcher in the background (as watch --detach)"),
                              ("stop", _stop, "stop the running watcher; the settings stay"),
                              ("off", _off, "stop the watcher, forget the settings and the password")):
        actions.add_parser(name, help=help_).set_defaults(func=func)
    w = actions.add_parser("watch", help="read replies and send the mails (foreground, or --detach)")
    w.add_argument("--detach", action="store_true", help="run in the background (output in the email log)")
    w.set_defaults(func=_watch)


def _dkim_keys(have: dict[str, str], given: list[str]) -> dict[str, str]:
    from pilothouse.core.notify.settings import dkim_record
    from pilothouse.providers.errors import UserError
    from pilothouse.providers.userfile import read_text

    for item in given:
        domain, sep, file = item.partition("=")
        if not sep or not domain.strip():
            raise UserError(f"--dkim-key {item[:80]!r}: give DOMAIN=FILE (or DOMAIN= to forget its key)")
        domain = domain.strip().lower()
        if not file:
            have.pop(domain, None)
            continue
        try:
            text = read_text(file, f"--dkim-key {domain}")
        except OSError as exc:
            raise UserError(f"--dkim-key {domain}={file}: {exc.strerror or exc}: give the path of the domain's "
                            "PEM public key (or of its DKIM record)") from None
        have[domain] = dkim_record(text, f"--dkim-key {domain}={file}")
    return have


def _setup(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import settings as st
    from pilothouse.core.state.events import utc_now_iso
    from pilothouse.providers.errors import UserError

    old = st.load()
    data = old.model_dump() if old else {}
    data.update({field: getattr(args, opt) for opt, field in _FIELDS.items() if getattr(args, opt) is not None})
    data.setdefault("enabled_at", utc_now_iso())
    if args.dkim_key:
        data["dkim_keys"] = _dkim_keys(dict(data.get("dkim_keys") or {}), args.dkim_key)
    missing = [f"--{o.replace('_', '-')}" for o in ("address", "operator", "imap_host", "smtp_host")
               if not data.get(_FIELDS[o])]
    if missing:
        raise UserError(f"notify email setup: give {', '.join(missing)}")
    conf = st.validate(data, "notify email setup")
    if not args.no_password:
        if args.password_from_stdin:
            value = sys.stdin.readline()
        elif sys.stdin.isatty():
            import getpass

            value = getpass.getpass(f"app password for {conf.login} (input hidden): ")
        else:
            raise UserError("no terminal to prompt on: pipe the app password in with --password-from-stdin "
                            "(or pass --no-password)")
        from pilothouse.providers import keys

        try:
            used = st.set_password(value, args.backend)
        except keys.NoKeyringBackend:
            raise UserError("no OS keyring is available on this machine: set up a keyring backend, or keep the "
                            "app password in a 0600 file with `pilothouse notify email setup --backend file`"
                            ) from None
        print(f"app password stored ({used})")
    path = st.save(conf)
    print(f"email settings saved in {path}; try them: pilothouse notify email test")
    return 0


def _loaded() -> Any:
    from pilothouse.core.notify import settings as st
    from pilothouse.providers.errors import UserError

    conf = st.load()
    if conf is None:
        raise UserError("email is not set up: run `pilothouse notify email setup`")
    return conf


def _test(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import compose, transport
    from pilothouse.core.notify import settings as st

    conf = _loaded()
    password = st.password()
    ok = True
    mail = compose.answer_mail(conf, None, "[pilothouse] test", "This is pilothouse's test mail: sending works.\n"
                               "Reply `status` to see that your replies are read and obeyed.")
    try:
        transport.send(conf, password, mail)
        print(f"SMTP {conf.smtp_host}:{conf.smtp_port}: sent a test mail to {conf.operator}")
    except Exception as exc:  # any failure of the server or the network is the test's answer
        ok = False
        print(f"SMTP {conf.smtp_host}:{conf.smtp_port}: {transport.describe(exc)}")
    try:
        client = transport.imap_connect(conf, password)
        idle = b"IDLE" in client.capabilities()
        client.logout()
        print(f"IMAP {conf.imap_host}:{conf.imap_port}: logged in, folder {conf.imap_folder}, "
              + ("IDLE (replies are read at once)" if idle else f"no IDLE (looks every {conf.poll_s}s)"))
    except Exception as exc:  # as above
        ok = False
        print(f"IMAP {conf.imap_host}:{conf.imap_port}: {transport.describe(exc)}")
    return 0 if ok else 1


def _status(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import mailstate, watch
    from pilothouse.core.notify import settings as st
    from pilothouse.providers import keys

    conf = st.load()
    if conf is None:
        print("email: off (set it up: pilothouse notify email setup)")
        return 0
    for k, v in conf.model_dump().items():
        if k == "dkim_keys":  # the domains; the keys are long and public
            v = ", ".join(f"{d} (given)" for d in sorted(v)) or "none given: looked up in DNS"
        print(f"  {k}: {v}")
    print(f"  password: {'stored (' + keys.backend() + ')' if keys.has_key(st.KEY) else 'none'}")
    print(f"  watcher: {'running' if watch.running() else 'not running (pilothouse notify email watch --detach)'}"
          f"; log: {watch.log_file()}")
    if mailstate.db_path().exists():
        conn = mailstate.connect()
        counts = dict(conn.execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall())
        conn.close()
        print("  outbox: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "empty"))
    return 0


def _off(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import settings as st
    from pilothouse.core.notify import watch

    stopped = watch.stop_running()
    print("email is off; settings and password removed" if st.turn_off() else "email was not set up")
    if stopped:
        print(f"the email watcher (pid {stopped}) stopped")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import watch

    pid = watch.stop_running()
    print(f"the email watcher (pid {pid}) stopped; the settings are kept (`notify email start` starts it)"
          if pid else "no email watcher is running")
    return 0


def _start(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import watch

    _loaded()
    print(f"email watcher started; log: {watch.log_file()}" if watch.start_detached()
          else "an email watcher is already running")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from pilothouse.core.notify import watch

    _loaded()
    if args.detach:
        print("email watcher started" if watch.start_detached() else "an email watcher is already running")
        return 0
    return watch.main()
