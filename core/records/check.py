"""`pilothouse check`: the repository's settings against everything they name, before a job runs.

Loading project.yaml already refuses what the file alone can show (unknown keys, bad values, NUL
bytes in commands, duplicate keys). This adds what needs the rest of the machine: the providers
the policy names exist, the simulator scenario is a scenario file where scenarios may live,
tasks.yaml reads, the runtime store is sound and holds what the event log says it does, and with `executor: ray` Ray is installed and the cluster's head answers. Each finding is one line with the fix; `job start` refuses to start on any.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.providers.errors import UserError, single_line

FILE = ".ai/project.yaml"
# a scenario given as a path must not be one of the system's files (the simulator reads it, and a
# parse error quotes it): these trees never hold one
_SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/boot", "/root")


def check_repo(layout: RepoLayout) -> list[str]:
    """Every finding, one line each; [] when the settings are fit to run a job."""
    from pilothouse.core.records.project import load_project

    try:
        project = load_project(layout)
    except UserError as exc:
        return [str(exc)]  # the rest is judged against a project that loads
    found = _providers(project)
    if project.sim_scenario:
        found += _scenario(layout, project.sim_scenario)
    found += _tasks(layout)
    found += _state(layout)
    if project.executor == "ray":
        found += _cluster(str(project.ray.address))
    # a name quoted from the file (a provider, a scenario) may hold a line break
    return [single_line(line) for line in found]


def _cluster(address: str) -> list[str]:
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return [f"executor: ray in {FILE} needs Ray here: pip install 'pilothouse[ray]'"]
    unanswered = ray_head_unanswered(address)
    return [unanswered] if unanswered else []


def ray_head_unanswered(address: str) -> str | None:
    """The finding when no Ray head answers at the cluster's address; `ray.init` would retry it for
    ever without a word, and an open port is not enough: something else listening there passed
    this check once and every run then failed ~20 s later with a reason that did not name
    ray.address (core/executor/cluster.py asks this before joining)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    fix = f"start the cluster's head (`ray start --head --port {port}`) or set ray.address to its host:port"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return f"ray.address in {FILE}: no Ray head answers at {address} ({why}); {fix}"
    from pilothouse.core.records.ray_head import not_a_ray_head

    not_ray = not_a_ray_head(address)
    if not_ray:
        return f"ray.address in {FILE}: {address} answers, but {not_ray}: it is not a Ray head; {fix}"
    return None


def require_fit(layout: RepoLayout) -> None:
    """Raise one UserError with the first finding (and how many more) — `job start` calls it."""
    found = check_repo(layout)
    if found:
        more = f" (and {len(found) - 1} more: `pilothouse check` lists them)" if len(found) > 1 else ""
        raise UserError(found[0] + more)


def _providers(project: Any) -> list[str]:
    import difflib

    from pilothouse.core.records.project import split_provider
    from pilothouse.providers.registry import load_providers

    try:
        known = load_providers()
    except UserError as exc:
        return [str(exc)]
    named: list[tuple[str, str]] = []
    roles = project.model_policy.roles
    for role in ("coordinator", "reviewer"):
        spec = getattr(roles, role)
        if spec:
            named.append((f"model_policy.roles.{role}", split_provider(spec)[0]))
    for name, a in project.model_policy.assignments.items():
        named.append((f"model_policy.assignments.{name}.provider", a.provider))
    out = []
    for field, provider in named:
        if provider in known:
            continue
        close = difflib.get_close_matches(provider, list(known), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        out.append(f"{FILE}: {field}: unknown provider '{provider}': {hint}`pilothouse providers list` "
                   "shows the ones there are")
    return out


def _scenario(layout: RepoLayout, spec: str) -> list[str]:
    from pilothouse.providers.sim.scenario import load_scenario, scenario_dirs

    field = f"{FILE}: sim_scenario"
    if "\0" in spec:
        return [f"{field}: has a NUL byte: give a scenario name or a path to a .yaml file"]
    looks_like_path = "/" in spec or spec.endswith((".yaml", ".yml"))
    if looks_like_path:
        path = Path(spec).expanduser()
        if not path.is_absolute():
            path = layout.root / path
        resolved = path.resolve()
        inside = [d.resolve() for d in scenario_dirs()] + [layout.root.resolve()]
        if not any(resolved.is_relative_to(d) for d in inside):
            if resolved.suffix not in (".yaml", ".yml") or \
                    any(resolved.is_relative_to(t) for t in _SYSTEM_TREES):
                return [f"{field}: {spec} is not where scenarios live: give a scenario name "
                        "(`pilothouse sim list`) or a .yaml file of yours"]
        if not resolved.is_file():
            return [f"{field}: {spec}: no such scenario file: fix the path or give a scenario name"]
        spec = str(resolved)
    try:
        load_scenario(spec)
    except UserError as exc:
        return [f"{field}: {exc}"]
    return []


def _state(layout: RepoLayout) -> list[str]:
    """The runtime store's damage, or the work it lost (read only: a check creates nothing)."""
    from pilothouse.core.records import state_witness

    try:
        missing = state_witness.lost(layout)
    except UserError as exc:  # StateDamaged, StateBusy: one line naming the damage and the repair
        return [str(exc)]
    return [state_witness.lost_line(layout, missing)] if missing else []


def _tasks(layout: RepoLayout) -> list[str]:
    from pilothouse.core.records.taskgraph import load_tasks

    try:
        load_tasks(layout)
    except UserError as exc:
        return [str(exc)]
    return []
