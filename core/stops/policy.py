"""Model policy: who does which work (project.yaml `model_policy`).

- Roles (coordinator, reviewer) are pinned as `provider[/model]`. A job's coordinator is pinned
  in the job once chosen and never changes during the job: when its provider is at a usage
  limit, the job's planning waits for it.
- Worker assignments name a provider/model, which task complexities and modes they may take,
  and approved fallbacks. A task opts in with `model_assignment`; otherwise the default
  assignment, then the others in file order, are tried. An explicit assignment switches only to
  its approved fallbacks, and only for a usage limit — never because a task doesn't fit.
- A task that already has a provider (it has a session to resume) stays with it.
- A model the capability probe found lacking what the role needs (providers/capabilities.py:
  a builder's tool calls with `tool_choice: auto`, everyone's result-block protocol) takes no
  such work; the reason names what it lacks and which probed models can (`capability_gap`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pilothouse.core.stops.quota import Availability
from pilothouse.providers.errors import UserError

AvailabilityOf = Callable[[str], Availability] | Mapping[str, Availability]
# (provider, model, role) -> why that model cannot take the role, or None
CapabilityOf = Callable[[str, str | None, str], str | None]


class ModelUnfit(UserError):
    """No model the policy allows has what the role needs (the capability probe's verdict): its
    own kind of stop (`model_unfit`), naming the capability and the models that have it."""

    def __init__(self, message: str, gaps: list[str]) -> None:
        super().__init__(message)
        self.gaps = gaps


@dataclass
class Choice:
    provider: str | None        # None: nothing may launch now (see waiting / why)
    model: str | None
    why: str
    assignment: str | None = None
    fallback: bool = False
    waiting: bool = False       # every eligible provider is at a usage limit; look again at next_check_at
    next_check_at: datetime | None = None
    considered: list[dict[str, Any]] = field(default_factory=list)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.provider, self.model, self.why))

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "why": self.why, "assignment": self.assignment,
                "fallback": self.fallback, "waiting": self.waiting,
                "next_check_at": self.next_check_at.isoformat() if self.next_check_at else None,
                "considered": self.considered}


def _avail(availability: AvailabilityOf | None, provider: str) -> Availability:
    if availability is None:
        return Availability(True, "availability not checked")
    if callable(availability):
        return availability(provider)
    return availability.get(provider) or Availability(True, f"{provider}: no usage limit recorded")


def _get(task: Any, name: str, default: Any = None) -> Any:
    if isinstance(task, Mapping):
        return task.get(name, default)
    return getattr(task, name, default)


def fits(assignment: Any, complexity: str, mode: str) -> str | None:
    """None when the assignment may take this work, else why not."""
    if complexity not in assignment.complexity:
        return f"takes only {'/'.join(assignment.complexity)} tasks (task is {complexity})"
    if assignment.modes and mode not in assignment.modes:
        return f"takes only modes {'/'.join(assignment.modes)} (run is {mode})"
    return None


def choose_worker(project: Any, task: Any, availability: AvailabilityOf | None = None, *,
                  mode: str = "code", current: tuple[str, str | None] | None = None,
                  default: tuple[str, str | None] | None = None, capable: CapabilityOf | None = None) -> Choice:
    """Pick the provider and model for a task's builder run; `why` says how.

    `current`: the provider/model the task already works with (kept: its session lives there).
    `default`: used when the project defines no assignments at all.
    """
    mp = project.model_policy
    complexity = _get(task, "complexity") or "standard"
    tid = _get(task, "id") or _get(task, "task") or "?"
    explicit = _get(task, "model_assignment")
    if current is not None and current[0]:
        av = _avail(availability, current[0])
        if av.available:
            return Choice(current[0], current[1], f"{tid}: stays on {current[0]}, which holds its session")
        return Choice(None, None, f"{tid}: waits for {current[0]}, which holds its session: {av.reason}",
                      waiting=True, next_check_at=av.next_check_at)
    if explicit and explicit not in mp.assignments:
        known = ", ".join(mp.assignments) or "none defined"
        raise UserError(f"task {tid}: model_assignment '{explicit}' is not in project.yaml "
                        f"model_policy.assignments ({known}): fix the task or add the assignment")
    if not mp.assignments:
        if default is None:
            raise UserError("project.yaml model_policy.assignments is empty and no default provider is set: "
                            "add an assignment (name: {provider: ...})")
        gap = capable(default[0], default[1], "builder") if capable else None
        if gap:
            raise ModelUnfit(f"task {tid}: the default provider cannot build: {gap}", [gap])
        av = _avail(availability, default[0])
        if av.available:
            extra = f"; {av.reason}" if av.check_due else ""
            return Choice(default[0], default[1], f"{tid}: default provider {default[0]} (no assignments set){extra}")
        return Choice(None, None, f"{tid}: waits for {default[0]}: {av.reason}", waiting=True,
                      next_check_at=av.next_check_at)

    if explicit:
        a = mp.assignments[explicit]
        unfit = fits(a, complexity, mode)
        if unfit:
            raise UserError(f"task {tid}: its assignment '{explicit}' ({a.provider}) {unfit}: change the task's "
                            "complexity or model_assignment")
        chain = [(explicit, False)] + [(fb, True) for fb in a.fallbacks]
    else:
        names = list(mp.assignments)
        if mp.default_assignment:
            names.remove(mp.default_assignment)
            names.insert(0, mp.default_assignment)
        chain = [(n, False) for n in names]

    considered: list[dict[str, Any]] = []
    waits: list[Availability] = []
    unable: list[str] = []
    for name, is_fallback in chain:
        a = mp.assignments[name]
        unfit = fits(a, complexity, mode)
        if unfit:
            considered.append({"assignment": name, "provider": a.provider, "skipped": unfit})
            continue
        gap = capable(a.provider, a.model, "builder") if capable else None
        if gap:
            considered.append({"assignment": name, "provider": a.provider, "skipped": gap})
            unable.append(f"'{name}' {gap}")
            continue
        av = _avail(availability, a.provider)
        if not av.available:
            considered.append({"assignment": name, "provider": a.provider, "skipped": av.reason})
            waits.append(av)
            continue
        if is_fallback:
            why = (f"{tid}: approved fallback '{name}' ({a.provider}) of '{explicit}', "
                   f"whose provider is at a usage limit")
        elif explicit:
            why = f"{tid}: assignment '{name}' ({a.provider}) named by the task"
        elif considered:
            why = f"{tid}: '{name}' ({a.provider}), the first model assignment that fits and is available"
        else:
            why = f"{tid}: '{name}' ({a.provider}), the {'default' if name == mp.default_assignment else 'first'} model assignment"
        if av.check_due:  # granted the one due availability check: this run is it
            why += f"; {av.reason}"
        return Choice(a.provider, a.model, why, assignment=name, fallback=is_fallback, considered=considered)
    if not waits and unable:
        raise ModelUnfit(f"task {tid}: no model in project.yaml model_policy can build it: " + "; ".join(unable),
                         unable)
    if not waits:
        raise UserError(f"task {tid} ({complexity}, mode {mode}): no assignment in project.yaml "
                        "model_policy may take it: widen an assignment's complexity/modes")
    soonest = min((w.next_check_at for w in waits if w.next_check_at), default=None)
    return Choice(None, None, f"{tid}: every eligible provider is at a usage limit ({waits[0].reason})",
                  waiting=True, next_check_at=soonest, considered=considered)


def role_choice(project: Any, role: str, availability: AvailabilityOf | None = None, *,
                pinned: str | None = None, default: tuple[str, str | None] | None = None,
                capable: CapabilityOf | None = None) -> Choice:
    """Provider for a control role. `pinned` (the job's coordinator) always wins, even while its
    provider is at a usage limit — then the role waits rather than switching."""
    from pilothouse.core.records.project import split_provider

    if pinned:
        prov, model = split_provider(pinned)
        source = f"pinned in the job ({pinned})"
    else:
        spec = getattr(project.model_policy.roles, role, None)
        if spec:
            prov, model = split_provider(spec)
            source = f"model_policy.roles.{role} ({spec})"
        elif role == "reviewer" and project.model_policy.roles.coordinator:
            prov, model = split_provider(project.model_policy.roles.coordinator)
            source = "the coordinator's pin (no reviewer pin set)"
        else:
            mp = project.model_policy
            name = mp.default_assignment or next(iter(mp.assignments), None)
            if name is not None:
                prov, model = mp.assignments[name].provider, mp.assignments[name].model
                source = f"assignment '{name}' (no {role} pin set)"
            elif default is not None:
                prov, model = default
                source = f"the default provider (no {role} pin set)"
            else:
                raise UserError(f"no {role} provider: set model_policy.roles.{role} in .ai/project.yaml to a "
                                f"provider `pilothouse providers list` shows (e.g. roles: {{{role}: claude-code}})")
    gap = capable(prov, model, "assigner" if role == "coordinator" else role) if capable else None
    if gap:
        raise ModelUnfit(f"the {role} cannot be {prov} ({source}): {gap}", [gap])
    av = _avail(availability, prov)
    if av.available:
        return Choice(prov, model, f"{role}: {prov} — {source}")
    return Choice(None, None, f"{role} waits for {prov} ({source}): {av.reason}", waiting=True,
                  next_check_at=av.next_check_at)


def coordinator_pin(project: Any, default: tuple[str, str | None] | None = None,
                    capable: CapabilityOf | None = None) -> str:
    """What a new job pins as its coordinator (`provider` or `provider/model`)."""
    c = role_choice(project, "coordinator", None, default=default, capable=capable)
    assert c.provider is not None
    return f"{c.provider}/{c.model}" if c.model else c.provider


def providers_in_policy(project: Any) -> list[str]:
    mp = project.model_policy
    seen: list[str] = []
    from pilothouse.core.records.project import split_provider

    for spec in (mp.roles.coordinator, mp.roles.reviewer):
        if spec and split_provider(spec)[0] not in seen:
            seen.append(split_provider(spec)[0])
    for a in mp.assignments.values():
        if a.provider not in seen:
            seen.append(a.provider)
    return seen


def capability_gap(provider: str, model: str | None, role: str, *, scenario: str | None = None) -> str | None:
    """Why the provider's model cannot take the role, by its capability probe (run now, once, when
    it has none recorded); None when it can or the probe cannot judge it."""
    from pilothouse.providers import capabilities, capability_store, provider_index

    rec = provider_index.record(provider)
    caps = capability_store.cached(rec, model or None, scenario=scenario)
    missing = capabilities.lacking(caps, rec.runner, role)
    if not missing:
        return None
    can = [key for (key, m), c in capability_store.every().items()
           if m == provider_index.records().get(key, {}).get("model_id")
           and not capabilities.lacking(c, provider_index.record(key).runner, role) and not c.get("error")]
    others = (f"models the probe found able: {', '.join(sorted(set(can)))}" if can else
              "probe another with `pilothouse providers check NAME`")
    return (f"{provider}/{model or rec.model_id} lacks {' and '.join(capabilities.WHAT[m] for m in missing)} "
            f"(capability probe of {caps.get('probed_at', 'now')}), which {role}s need; {others}")
