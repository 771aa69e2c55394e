"""CLI group 'serve': `pilothouse serve [REPO]` serves the cockpit to a browser, for its owner only.

The server lives in tui/serve/ (it serves the Textual app) and is imported inside the handler, so
the rest of the CLI never pays for aiohttp or textual-serve.
"""

from __future__ import annotations

import re

from pilothouse.core.commands._out import positive_int, positive_seconds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_LABEL = re.compile(r"[A-Za-z0-9._-]{1,40}")


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the cockpit to a browser, for its owner only",
                       description="Serve the cockpit to a browser on loopback. Prints one URL carrying a "
                       "fresh secret token: without it (or the cookie the first visit sets) every request is "
                       "refused. Each tab is its own cockpit, named in the audit trail as LABEL@browser-ID.")
    p.add_argument("repo", nargs="?", metavar="REPO", help="repository path or registered name")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; the Host header must name it or loopback)")
    p.add_argument("--port", type=int, default=8600, help="TCP port (default 8600; 0 picks a free one)")
    p.add_argument("--socket", metavar="PATH",
                   help="serve on this Unix socket (owner-only) instead of a port: `ssh -L 8600:PATH host`")
    p.add_argument("--label", help="the sessions' name in the audit trail (default: your login name)")
    p.add_argument("--max-sessions", type=positive_int, default=4, help="live browser sessions at once (default 4)")
    p.add_argument("--idle-timeout", type=positive_seconds, default=1800.0, metavar="SECONDS",
                   help="end a session after this long without a key (default 1800)")
    p.set_defaults(func=_serve)


def _serve(args: Any) -> int:
    from pathlib import Path

    from pilothouse.core.commands.view import resolve
    from pilothouse.providers.errors import UserError

    layout, choices = resolve(args.repo)
    if layout is None:
        names = ", ".join(c.root.name for c in choices)
        raise UserError(f"serve needs one repository: pass REPO (one of {names})")
    label = args.label or _login()
    if not _LABEL.fullmatch(label):
        raise UserError(f"--label {label!r}: use 1-40 letters, digits, '.', '_' or '-'")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: use 0-65535 (0 picks a free port)")
    socket = Path(args.socket).expanduser().absolute() if args.socket else None
    if socket is not None and not socket.parent.is_dir():
        raise UserError(f"--socket {args.socket}: its folder does not exist")
    from pilothouse.tui.serve import ServeOptions, serve

    options = ServeOptions(repo=layout.root, label=label, host=args.host, port=args.port, socket=socket,
                           max_sessions=args.max_sessions, idle_timeout=args.idle_timeout)
    try:
        return serve(options)
    except OSError as exc:  # the port taken, the address not this machine's
        raise UserError(f"serve: cannot listen on {args.socket or f'{args.host}:{args.port}'}: "
                        f"{exc.strerror or exc} (pick another with --port or --socket)") from None


def _login() -> str:
    import getpass

    try:
        name = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "operator"
    return name if _LABEL.fullmatch(name) else "operator"
