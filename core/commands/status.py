"""CLI: `pilothouse status [--json]` — keys, runners, endpoints and confinement at a glance.

Budget 0.15 s wall: the provider records come from the JSON index (no pydantic, no YAML), key
presence from the key index (no keyring import), runner modules are imported only for the runners
some provider uses.
"""

from __future__ import annotations

import argparse

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="providers' keys, runners and endpoints; confinement")
    add_json_flag(p)
    p.set_defaults(func=cmd_status)


def _runner_info(name: str) -> dict[str, Any]:
    from pilothouse.providers.errors import UserError
    from pilothouse.providers.runners import get_runner

    try:
        runner = get_runner(name)
    except UserError:
        return {"name": name, "known": False, "installed": False, "version": None}
    except Exception as exc:  # a runner module that fails to import is a status line, not a crash
        return {"name": name, "known": True, "installed": False, "version": None,
                "problem": f"{type(exc).__name__}: {exc}"}
    try:
        installed = bool(runner.installed())
        version = runner.version() if installed else None
    except Exception as exc:  # a runner's probe failing must not hide everyone else's status
        return {"name": name, "known": True, "installed": False, "version": None, "problem": str(exc)}
    return {"name": name, "known": True, "installed": installed, "version": version}


def _confinement() -> dict[str, Any] | None:
    try:
        from pilothouse.providers import confine
    except ImportError:
        return None
    fn = getattr(confine, "status", None)
    if fn is None:
        return None
    try:
        result = fn()
        return dict(result) if isinstance(result, dict) else None
    except Exception as exc:
        return {"mode": "unknown", "reason": str(exc)}


def collect() -> dict[str, Any]:
    import threading

    from pilothouse.core.commands.workers.providers import provider_rows
    from pilothouse.providers import keys, paths

    # the confinement check spawns bwrap and the supervisor's imports the store: let them run while
    # this thread imports the runners
    conf: dict[str, Any] = {}

    def probe() -> None:
        conf["result"] = _confinement()
        conf["supervisor"] = _supervisor()

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    rows = provider_rows()
    runners = {name: _runner_info(name) for name in sorted({r["runner"] for r in rows})}
    providers = [{"key": r["key"], "display_name": r["display_name"], "api_key": r["key_status"],
                  "runner": r["runner"], "runner_installed": runners[r["runner"]]["installed"],
                  "runner_version": runners[r["runner"]]["version"], "model": r["model_id"],
                  "endpoint": r["base_url"], "source": r.get("source")} for r in rows]
    backend = keys.backend()
    t.join()
    return {"providers": providers, "runners": list(runners.values()),
            "keys": {"backend": backend,
                     "location": str(paths.secrets_dir()) if backend == "file" else "OS keyring (service pilothouse)"},
            "confinement": conf.get("result"), "supervisor": conf.get("supervisor")}


def _supervisor() -> dict[str, Any] | None:
    """The supervisor of the repository containing the current directory ({repo, running, pid,
    heartbeat_age_s, ...}); None outside a repository set up for pilothouse."""
    from pilothouse.core.commands.jobs import supervisor_info
    from pilothouse.core.records.layout import find_repo
    from pilothouse.providers.errors import UserError

    try:
        layout = find_repo()
    except UserError:
        return None
    if not layout.project_yaml.is_file():
        return None
    return {"repo": str(layout.root), **supervisor_info(layout)}


def cmd_status(args: argparse.Namespace) -> int:
    data = collect()
    if args.json:
        emit_json(data)
        return 0
    print_table(("PROVIDER", "API KEY", "RUNNER", "INSTALLED", "VERSION", "ENDPOINT"),
                [(p["key"], p["api_key"], p["runner"], "yes" if p["runner_installed"] else "no",
                  p["runner_version"] or "-", p["endpoint"]) for p in data["providers"]])
    k = data["keys"]
    print(f"\nkeys: {k['backend']} backend — {k['location']}")
    c = data["confinement"]
    if c is not None:
        if c.get("mode") == "bwrap":
            line = f"bwrap {c.get('bwrap_version') or ''}".rstrip() + (" (probed)" if c.get("probed") else
                                                                    " (not probed yet: `pilothouse probe`)")
        else:
            line = f"{c.get('mode')}: {c.get('reason') or ''}".rstrip(": ")
        print(f"confinement: {line}")
    sup = data["supervisor"]
    if sup is not None:
        from pilothouse.core.commands.jobs import supervisor_line

        print(f"{supervisor_line(sup)} — {sup['repo']}")
    missing = [p["key"] for p in data["providers"] if p["api_key"] == "missing"]
    if missing:
        print(f"set a key with `pilothouse key set PROVIDER` (missing: {', '.join(missing)})")
    return 0
