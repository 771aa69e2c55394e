"""Host agents (Claude Code, Codex) that use pilothouse as their worker pool.

Each host gets ONE playbook skill, rendered from data/skills/pilothouse/SKILL.md with a worker
table built from that host's own entry in config_dir()/hosts.json — a host never learns about a
provider it was not given. The skill lives at <host dir>/skills/pilothouse/SKILL.md (Claude Code:
$CLAUDE_CONFIG_DIR or ~/.claude; Codex: $CODEX_HOME or ~/.codex). Writing is idempotent and
touches nothing else in the host's directory; a host with no provider left has no skill.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError
from pilothouse.providers.modes import MODES

HOSTS = ("claude", "codex")
SKILL = "pilothouse"
MARKER = "{{WORKERS}}"


def hosts_file() -> Path:
    return paths.config_dir() / "hosts.json"


def host_dir(host: str) -> Path:
    check_host(host)
    var = "CLAUDE_CONFIG_DIR" if host == "claude" else "CODEX_HOME"
    value = os.environ.get(var)
    if value:
        return Path(value).expanduser()
    return Path.home() / (".claude" if host == "claude" else ".codex")


def skill_path(host: str) -> Path:
    return host_dir(host) / "skills" / SKILL / "SKILL.md"


def check_host(host: str) -> None:
    if host not in HOSTS:
        raise UserError(f"unknown host '{host}'; use one of {', '.join(HOSTS)}")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UserError(f"unknown mode '{mode}'; use one of {', '.join(MODES)}")


# --- hosts.json -------------------------------------------------------------------------------

def load() -> dict[str, Any]:
    try:
        data = json.loads(hosts_file().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UserError(f"{hosts_file()} is not valid JSON ({exc}); fix or delete it") from None
    return data if isinstance(data, dict) else {}


def save(data: dict[str, Any]) -> None:
    from pilothouse.providers.fsutil import atomic_write_json

    atomic_write_json(hosts_file(), data)


def entry(data: dict[str, Any], host: str) -> dict[str, Any]:
    e = data.setdefault(host, {})
    e.setdefault("providers", [])
    e.setdefault("modes", {})
    return e


# --- operations (each returns what changed, for the CLI to print) ------------------------------

def add_provider(host: str, provider: str, mode: str | None = None) -> list[str]:
    check_host(host)
    if mode is not None:
        check_mode(mode)
    data = load()
    e = entry(data, host)
    done = []
    if provider not in e["providers"]:
        e["providers"].append(provider)
        done.append(f"added {provider} to {host}")
    if mode is not None and e["modes"].get(mode) != provider:
        e["modes"][mode] = provider
        done.append(f"routed {mode} to {provider} on {host}")
    save(data)
    done += sync(host, data)
    return done


def remove_provider(host: str, provider: str) -> list[str]:
    check_host(host)
    data = load()
    e = entry(data, host)
    if provider not in e["providers"]:
        raise UserError(f"{provider} is not installed on {host}; `pilothouse status` lists what is")
    e["providers"].remove(provider)
    dropped = [m for m, p in e["modes"].items() if p == provider]
    for m in dropped:
        del e["modes"][m]
    save(data)
    return [f"removed {provider} from {host}"] + [f"dropped route {m} on {host}" for m in dropped] + sync(host, data)


def remove_route(host: str, mode: str) -> list[str]:
    check_host(host)
    check_mode(mode)
    data = load()
    e = entry(data, host)
    if mode not in e["modes"]:
        raise UserError(f"no provider is routed for {mode} on {host}")
    del e["modes"][mode]
    save(data)
    return [f"dropped route {mode} on {host}"] + sync(host, data)


def remove_host(host: str) -> list[str]:
    check_host(host)
    data = load()
    e = data.get(host)
    had = bool(e and (e.get("providers") or e.get("modes")))
    if e:
        e["providers"], e["modes"] = [], {}
    out = sync(host, data)
    return ([f"removed every provider from {host}"] if had else []) + out


def sync(host: str, data: dict[str, Any] | None = None) -> list[str]:
    """Make the host's skill match its configuration: written, refreshed, or removed."""
    data = load() if data is None else data
    providers = (data.get(host) or {}).get("providers") or []
    path = skill_path(host)
    if not providers:
        return _remove_skill(host, path, data)
    text = render(host, data)
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current == text:
        return []
    from pilothouse.providers.fsutil import atomic_write_text

    # remember which of the host dir and its skills/ we create, so removing the skill removes them too
    made = [str(d) for d in (host_dir(host), path.parent.parent) if not d.exists()]
    if made:
        e = entry(data, host)
        e["created_dirs"] = sorted(set(e.get("created_dirs") or []) | set(made))
        save(data)
    atomic_write_text(path, text)
    return [f"{'wrote' if current is None else 'refreshed'} {path}"]


def _remove_skill(host: str, path: Path, data: dict[str, Any]) -> list[str]:
    out = []
    if path.parent.exists():
        shutil.rmtree(path.parent)
        out.append(f"removed {path.parent} (no provider left on {host})")
    for made in sorted((data.get(host) or {}).get("created_dirs") or [], key=len, reverse=True):
        d = Path(made)
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    if host in data and not data[host].get("modes"):
        data.pop(host)
    save(data)
    return out


# --- rendering --------------------------------------------------------------------------------

def template() -> str:
    return (paths.package_data() / "skills" / SKILL / "SKILL.md").read_text(encoding="utf-8")


def render(host: str, data: dict[str, Any]) -> str:
    return template().replace(MARKER, worker_table(host, data).rstrip("\n"))


def worker_table(host: str, data: dict[str, Any]) -> str:
    from pilothouse.providers import keys, provider_index

    e = data.get(host) or {}
    routes: dict[str, str] = e.get("modes") or {}
    rows = ["| provider | model | runner | modes | routed here | strengths | key |",
            "|---|---|---|---|---|---|---|"]
    records = provider_index.records()
    for key in e.get("providers") or []:
        rec = records.get(key)
        if rec is None:
            rows.append(f"| {key} | (provider no longer defined) | | | | | |")
            continue
        routed = ", ".join(m for m, p in routes.items() if p == key) or "-"
        needs = rec.get("needs_key", True)
        has = "not needed" if not needs else ("set" if keys.has_key(key) else "MISSING: `pilothouse key set "
                                                                            f"{key}`")
        rows.append("| {k} | {m} | {r} | {modes} | {routed} | {s} | {has} |".format(
            k=key, m=rec.get("model_id", ""), r=rec.get("runner", ""),
            modes=", ".join(rec.get("suitable_modes") or []), routed=routed,
            s="; ".join(rec.get("strengths") or []) or "-", has=has))
    if routes:
        rows.append("")
        rows.append("Routing: " + "; ".join(f"{m} → `--provider {p}`" for m, p in sorted(routes.items())))
    return "\n".join(rows) + "\n"


def status() -> dict[str, Any]:
    """Per host: providers, routes, skill path and whether it exists (for `status`)."""
    data = load()
    return {h: {"providers": (data.get(h) or {}).get("providers") or [],
                "modes": (data.get(h) or {}).get("modes") or {},
                "skill": str(skill_path(h)), "skill_installed": skill_path(h).exists()} for h in HOSTS}
