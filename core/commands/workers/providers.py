"""CLI: `pilothouse providers list|path [--json]` (more `providers` subcommands register below)."""

from __future__ import annotations

import argparse

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("providers", help="the configured providers (bundled + your overrides)",
                       description="Providers come from the bundled YAML and from YAML files in your "
                       "providers folder ($PILOTHOUSE_HOME/config/providers/, else "
                       "~/.config/pilothouse/providers/), which override fields of a bundled provider or add "
                       "new ones. `pilothouse providers path` prints both folders; docs/providers.md has "
                       "worked examples for llama.cpp, ollama and vLLM.")
    add_json_flag(p)
    p.set_defaults(func=cmd_list)  # bare `pilothouse providers` lists them
    actions = p.add_subparsers(dest="providers_action", metavar="ACTION")
    for add in SUBCOMMANDS:
        add(actions)


def _add_list(actions: Any) -> None:
    lp = actions.add_parser("list", help="list providers")
    add_json_flag(lp)
    lp.set_defaults(func=cmd_list)


def _add_usage_commands(actions: Any) -> None:
    """`providers status|check` live with the quota/model-policy commands (core/commands/models.py)."""
    try:
        from pilothouse.core.commands.models import register_provider_subcommands
    except ImportError:
        return
    register_provider_subcommands(actions)


def _add_path(actions: Any) -> None:
    pp = actions.add_parser("path", help="where provider files live: yours (add or override one there) and "
                            "the bundled ones", description="Prints the folder your provider YAML files go in "
                            "(a file NAME.yaml there adds provider NAME, or overrides the fields it names of a "
                            "bundled one) and the folder of the bundled providers.")
    add_json_flag(pp)
    pp.set_defaults(func=cmd_path)


# One function per subcommand group, each adding parsers to `providers`' subparsers; extend here.
SUBCOMMANDS: list[Any] = [_add_list, _add_path, _add_usage_commands]


def provider_folders() -> dict[str, Any]:
    """The user's providers folder (and whether it exists yet) and the bundled one."""
    from pilothouse.providers import paths  # not registry: pydantic is no cost to pay for two paths

    user = paths.config_dir() / "providers"  # registry.user_dir(), bundled_dir()
    return {"user": str(user), "user_exists": user.is_dir(), "bundled": str(paths.package_data() / "providers")}


def cmd_path(args: argparse.Namespace) -> int:
    folders = provider_folders()
    if getattr(args, "json", False):
        emit_json(folders)
        return 0
    made = "" if folders["user_exists"] else "  (not made yet: create it, then add NAME.yaml)"
    print(f"yours:   {folders['user']}{made}")
    print(f"bundled: {folders['bundled']}  (read-only: override a field with a file of the same key in yours)")
    return 0


def provider_rows() -> list[dict[str, Any]]:
    """Every provider with whether it has a key (never the key itself)."""
    from pilothouse.providers import capability_store, keys, provider_index

    configured = set(keys.configured_providers())
    probed = capability_store.every()
    rows = []
    for key, rec in provider_index.records().items():
        state = "configured" if key in configured else ("missing" if rec.get("needs_key", True) else "not needed")
        rows.append({**rec, "key_status": state, "capabilities": probed.get((key, rec.get("model_id")))})
    return rows


def probe_mark(caps: dict[str, Any] | None) -> str:
    """One short word for the probe: not probed, all there, or what is missing."""
    if not caps:
        return "-"
    missing = [k for k in ("tools_auto", "protocol", "streaming", "usage") if caps.get(k) is False]
    return "ok" if not missing else "no " + ",".join(missing)


def cmd_list(args: argparse.Namespace) -> int:
    rows = provider_rows()
    if getattr(args, "json", False):
        emit_json(rows)
        return 0
    print_table(("KEY", "RUNNER", "MODEL", "ENDPOINT", "API KEY", "PROBE", "NAME"),
                [(r["key"], r["runner"], r["model_id"], r["base_url"], r["key_status"], probe_mark(r["capabilities"]),
                  r["display_name"]) for r in rows])
    return 0
