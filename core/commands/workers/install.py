"""CLI group 'install' / 'uninstall': runners from npm, and providers on host agents.

  install runner opencode|claude-code|codex     uninstall runner NAME
  install PROVIDER on claude|codex [for MODE] [--global-key]
  install claude|codex|all                      (refresh the hosts' skills)
  install host claude|codex|opencode|all        (register `pilothouse mcp` in the host's config, and its skill)
  uninstall PROVIDER on HOST | for MODE on HOST | key PROVIDER | HOST | all | host HOST
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

HOSTS = ("claude", "codex")


def register(sub: Any) -> None:
    p = sub.add_parser("install", help="install a runner CLI, or give a provider to a host agent (claude, codex)",
                       description="install runner NAME | install PROVIDER on HOST [for MODE] [--global-key] | "
                                   "install HOST|all (refresh the host's pilothouse skill) | install host "
                                   "claude|codex|opencode|all (register the MCP server `pilothouse mcp` too)")
    p.add_argument("words", nargs="+", metavar="WORD")
    p.add_argument("--global-key", action="store_true",
                   help="also set the provider's API key (hidden prompt, or the first line of stdin)")
    p.add_argument("--backend", choices=("keyring", "file"),
                   help="with --global-key: where to keep keys (remembered, as for `key set`)")
    p.add_argument("--json", action="store_true", help="print what changed as JSON")
    p.set_defaults(func=_install)
    u = sub.add_parser("uninstall", help="remove a runner, a provider from a host, a route, a key, or a host",
                       description="uninstall runner NAME | PROVIDER on HOST | for MODE on HOST | key PROVIDER | "
                                   "HOST | all | host HOST (the MCP server and the skill)")
    u.add_argument("words", nargs="+", metavar="WORD")
    u.add_argument("--json", action="store_true", help="print what changed as JSON")
    u.set_defaults(func=_uninstall)


def _usage(verb: str) -> Any:
    from pilothouse.providers.errors import UserError

    if verb == "install":
        return UserError("usage: pilothouse install runner NAME | install PROVIDER on claude|codex "
                         "[for MODE] [--global-key] | install claude|codex|all | install host "
                         "claude|codex|opencode|all")
    return UserError("usage: pilothouse uninstall runner NAME | PROVIDER on HOST | for MODE on HOST | "
                     "key PROVIDER | claude|codex|all | host claude|codex|opencode|all")


def _report(done: list[str], as_json: bool) -> int:
    if as_json:
        from pilothouse.core.commands._out import emit_json

        emit_json({"changed": done})
    elif done:
        print("\n".join(done))
    else:
        print("nothing to change")
    return 0


def _install(args: Any) -> int:
    from pilothouse.providers import hosts

    w = args.words
    if w[0] == "runner":
        if len(w) != 2:
            raise _usage("install")
        from pilothouse.providers.runners import npm

        rec = npm.install(w[1])
        return _report([f"installed {w[1]} {rec['version']} ({rec['package']}) at {rec['binary']}"], args.json)
    if len(w) == 1 and w[0] in (*HOSTS, "all"):
        done: list[str] = []
        for h in (HOSTS if w[0] == "all" else (w[0],)):
            done += hosts.sync(h)
        return _report(done, args.json)
    if len(w) == 2 and w[0] == "host":
        return _report(_mcp_host(w[1], install=True), args.json)
    if len(w) in (3, 5) and w[1] == "on" and (len(w) == 3 or w[3] == "for"):
        provider, host = w[0], w[2]
        mode = w[4] if len(w) == 5 else None
        hosts.check_host(host)
        _check_provider(provider)
        if mode is not None:
            hosts.check_mode(mode)  # refuse a bad mode before storing a key or printing notes
        done = []
        if args.global_key:
            done.append(_set_key(provider, args.backend))
        for note in _notes(provider, check_key=not args.global_key):
            print(note, file=sys.stderr)
        done += hosts.add_provider(host, provider, mode)
        return _report(done, args.json)
    raise _usage("install")


def _uninstall(args: Any) -> int:
    from pilothouse.providers import hosts

    w = args.words
    if w[0] == "runner" and len(w) == 2:
        from pilothouse.providers.runners import npm

        removed = npm.uninstall(w[1])
        return _report([f"removed {w[1]}"] if removed else [], args.json)
    if w[0] == "key" and len(w) == 2:
        from pilothouse.providers import keys

        _check_provider(w[1])
        return _report([f"removed the key of {w[1]}"] if keys.remove_key(w[1]) else [], args.json)
    if w[0] == "for" and len(w) == 4 and w[2] == "on":
        return _report(hosts.remove_route(w[3], w[1]), args.json)
    if len(w) == 3 and w[1] == "on":
        return _report(hosts.remove_provider(w[2], w[0]), args.json)
    if len(w) == 1 and w[0] in (*HOSTS, "all"):
        done: list[str] = []
        for h in (HOSTS if w[0] == "all" else (w[0],)):
            done += hosts.remove_host(h)
        return _report(done, args.json)
    if len(w) == 2 and w[0] == "host":
        return _report(_mcp_host(w[1], install=False), args.json)
    raise _usage("uninstall")


def _mcp_host(host: str, install: bool) -> list[str]:
    """The MCP server in the host's own config, next to the skill (claude, codex) it gets today."""
    from pilothouse.providers import hosts, mcp_hosts

    names = mcp_hosts.HOSTS if host == "all" else (host,)
    for h in names:
        mcp_hosts.check_host(h)
    done: list[str] = []
    for h in names:
        done += mcp_hosts.register(h) if install else mcp_hosts.unregister(h)
        if h in hosts.HOSTS:
            done += hosts.sync(h) if install else hosts.remove_host(h)
    return done


def _check_provider(key: str) -> None:
    from pilothouse.providers import provider_index

    provider_index.record(key)  # UserError listing the known keys


def _set_key(provider: str, backend: str | None) -> str:
    from pilothouse.providers import keys
    from pilothouse.providers.errors import UserError

    if sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"API key for {provider} (input hidden): ")
    else:
        value = sys.stdin.readline()
    value = value.strip()
    if not value:
        raise UserError(f"no key given for {provider}; type it at the prompt or pipe it on stdin")
    keys.set_key(provider, value, backend)
    return f"stored the key of {provider}"


def _notes(provider: str, check_key: bool) -> list[str]:
    """What the host's worker will still lack: its key, its runner."""
    from pilothouse.providers import keys, provider_index
    from pilothouse.providers.runners import get_runner

    rec = provider_index.record(provider)
    out = []
    if check_key and getattr(rec, "needs_key", True) and not keys.has_key(provider):
        out.append(f"pilothouse: note: {provider} has no API key yet; add --global-key or run "
                   f"`pilothouse key set {provider}`")
    if not get_runner(rec.runner).installed():
        out.append(f"pilothouse: note: {provider} runs on {rec.runner}, which is not installed; run "
                   f"`pilothouse install runner {rec.runner}`")
    return out
