"""CLI: `pilothouse key set PROVIDER [--from-stdin] [--backend keyring|file]`, `key remove PROVIDER`."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("key", help="set or remove a provider's API key (never displayed)")
    actions = p.add_subparsers(dest="key_action", metavar="ACTION", required=True)
    s = actions.add_parser("set", help="store a provider's key (hidden prompt, or --from-stdin)",
                           description="Stores the key in the OS keyring, or with --backend file in a "
                           "0600 file in a 0700 directory (the choice is remembered).")
    s.add_argument("provider")
    s.add_argument("--from-stdin", action="store_true", help="read the key from the first line of stdin")
    s.add_argument("--backend", choices=("keyring", "file"), help="where to keep keys (remembered)")
    s.set_defaults(func=cmd_set)
    r = actions.add_parser("remove", help="delete a provider's stored key")
    r.add_argument("provider")
    r.set_defaults(func=cmd_remove)


def cmd_set(args: argparse.Namespace) -> int:
    from pilothouse.providers import keys, provider_index
    from pilothouse.providers.errors import UserError

    rec = provider_index.record(args.provider)
    chosen = args.backend or keys.backend()
    if chosen == "keyring":
        try:
            keys._keyring()  # say "no keyring here" before asking for the key, not after
        except keys.NoKeyringBackend:
            raise keys.NoKeyringBackend(keys._no_backend_message(rec.key)) from None
    if args.from_stdin:
        value = sys.stdin.readline()
    else:
        if not sys.stdin.isatty():
            raise UserError("no terminal to prompt on; pipe the key in with --from-stdin")
        import getpass

        value = getpass.getpass(f"API key for {rec.key} (input hidden): ")
    used = keys.set_key(rec.key, value, use_backend=chosen)
    where = f"a 0600 file in {keys.key_file(rec.key).parent}" if used == "file" else "the OS keyring"
    print(f"key for {rec.key} stored in {where}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from pilothouse.providers import keys, provider_index

    rec = provider_index.record(args.provider)
    if keys.remove_key(rec.key):
        print(f"key for {rec.key} removed")
    else:
        print(f"no key was stored for {rec.key}")
    return 0
