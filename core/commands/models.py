"""CLI group 'models': the project's model policy and each provider's current availability.

    pilothouse models [--json] [--repo PATH]
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="model policy (roles, assignments, fallbacks) and availability")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.set_defaults(func=_models)


def policy_report(layout: Any, now: Any = None) -> dict[str, Any]:
    """What `models` shows, for the CLI and the cockpit."""
    from pilothouse.core.records.project import load_project
    from pilothouse.core.stops import policy, quota

    project = load_project(layout)
    mp = project.model_policy
    providers = policy.providers_in_policy(project)
    for w in quota.windows(layout):
        if w["provider"] not in providers:
            providers.append(w["provider"])
    avail = {p: quota.availability(layout, p, now) for p in providers}
    pinned: dict[str, str] = {}
    if layout.state_db.exists():
        from pilothouse.core.state import store

        conn = store.connect(layout.state_db, readonly=True)
        try:
            pinned = {r["job"]: r["coordinator"] for r in conn.execute(
                "SELECT job, coordinator FROM jobs_state WHERE coordinator IS NOT NULL"
                " AND state NOT IN ('accepted', 'failed')")}
        finally:
            conn.close()
    return {
        "roles": {"coordinator": mp.roles.coordinator, "reviewer": mp.roles.reviewer},
        "default_assignment": mp.default_assignment,
        "assignments": {n: a.model_dump() for n, a in mp.assignments.items()},
        "pinned_coordinators": pinned,
        "availability": {p: {**a.as_dict(), "windows": quota.windows(layout, p)} for p, a in avail.items()},
        "availability_poll_seconds": project.availability_poll_seconds,
    }


def _models(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.records.layout import find_repo

    layout = find_repo(args.repo)
    rep = policy_report(layout)
    if args.json:
        emit_json(rep)
        return 0
    from pilothouse.providers.registry import labelled

    roles = rep["roles"]
    print(f"coordinator: {labelled(roles['coordinator']) if roles['coordinator'] else '(not pinned: default assignment)'}")
    print(f"reviewer:    {labelled(roles['reviewer']) if roles['reviewer'] else '(not pinned: the coordinator)'}")
    for job, pin in rep["pinned_coordinators"].items():
        print(f"  job {job}: coordinator pinned to {pin} (never changes during the job)")
    print()
    if rep["assignments"]:
        rows = []
        for name, a in rep["assignments"].items():
            mark = "*" if name == rep["default_assignment"] else ""
            rows.append([name + mark, labelled(a["provider"]), a["model"] or "(provider default)",
                         "/".join(a["complexity"]), "/".join(a["modes"]) or "any",
                         ", ".join(a["fallbacks"]) or "-"])
        print_table(["ASSIGNMENT", "PROVIDER", "MODEL", "COMPLEXITY", "MODES", "FALLBACKS (usage limits)"], rows)
        if rep["default_assignment"]:
            print("* default assignment")
    else:
        print("no worker assignments: workers use the default provider")
    print()
    if rep["availability"]:
        rows = [[p, "yes" if a["available"] else ("check due" if a["check_due"] else "no"), a["reason"]]
                for p, a in rep["availability"].items()]
        print_table(["PROVIDER", "AVAILABLE", "WHY"], rows)
    return 0


def register_provider_subcommands(prov_sub: Any) -> None:
    """Called by the 'providers' group with its subparsers: `providers status|check [PROVIDER]`."""
    st = prov_sub.add_parser("status", help="usage windows and availability per provider (this repository)")
    st.add_argument("provider", nargs="?", help="only this provider")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    st.set_defaults(func=_status)
    ck = prov_sub.add_parser("check", help="probe what a provider's model can do (streaming, usage, tool "
                                           "calls, the result-block protocol, context length) and, in a "
                                           "repository, whether it answers now; a few small real requests "
                                           "(may use a little allowance); records the outcome")
    ck.add_argument("provider", nargs="?", help="only this provider (default: every provider in the policy)")
    ck.add_argument("--scenario", metavar="NAME|FILE",
                    help="for the simulator: the scenario that answers the probe (default: probe)")
    ck.add_argument("--json", action="store_true", help="machine-readable output")
    ck.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    ck.set_defaults(func=_check)


def _status(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.stops import quota

    layout = find_repo(args.repo)
    names = [args.provider] if args.provider else sorted({w["provider"] for w in quota.windows(layout)})
    if not args.provider:
        try:
            from pilothouse.core.records.project import load_project
            from pilothouse.core.stops import policy

            names = [*policy.providers_in_policy(load_project(layout)), *[n for n in names]]
            names = list(dict.fromkeys(names))
        except Exception:  # no project.yaml: just what was observed
            pass
    rep = {p: {**quota.availability(layout, p).as_dict(), "windows": quota.windows(layout, p)} for p in names}
    if args.json:
        emit_json(rep)
        return 0
    if not rep:
        print("no provider in the model policy and no usage observed yet")
        return 0
    rows = []
    for p, a in rep.items():
        state = "available" if a["available"] else ("check due" if a["check_due"] else "waiting")
        rows.append([p, "-", "", "", state, a["reason"]])
        for w in a["windows"]:
            pct = "?" if w["used_pct"] is None else f"{w['used_pct']:g}%"
            rows.append(["", w["window"], pct, w["resets_at"] or "unknown",
                         "blocked" if w["blocked"] else "ok", f"seen {w['observed_at']} via {w['source']}"])
    print_table(["PROVIDER", "WINDOW", "USED", "RESETS", "STATE", "WHY / OBSERVED"], rows)
    return 0


def _check(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.stops.availability import check_provider
    from pilothouse.providers.errors import UserError

    try:
        layout = find_repo(args.repo)
    except UserError:
        if not args.provider or args.repo:
            raise
        layout = None  # outside a repository: the capability probe alone
    if args.provider:
        names = [args.provider]
    else:
        from pilothouse.core.records.project import load_project
        from pilothouse.core.stops import policy

        names = policy.providers_in_policy(load_project(layout))
        if not names:
            raise UserError("no provider in .ai/project.yaml model_policy: name one, e.g. "
                            "`pilothouse providers check sim`")
    results = []
    for p in names:
        caps = _probe(p, args.scenario)
        r = check_provider(layout, p) if layout is not None else {"provider": p, "outcome": None}
        results.append({**r, "capabilities": caps})
    if args.json:
        emit_json(results)
    else:
        from pilothouse.providers import capabilities

        for r in results:
            if r["outcome"] is not None:
                extra = f": {r['error']}" if r.get("error") and r["outcome"] != "available" else ""
                print(f"{r['provider']}: {r['outcome']}{extra} — {r['availability']['reason']}")
            print(f"{r['provider']}: {capabilities.summary(r['capabilities'])}")
            for role, missing in (r["capabilities"].get("lacks") or {}).items():
                print(f"{r['provider']}: cannot be {role}: lacks "
                      + ", ".join(capabilities.WHAT[m] for m in missing))
    ok = [r["outcome"] in ("available", None) and not (r["outcome"] is None and r["capabilities"].get("error")
                                                       and not r["capabilities"].get("skipped"))
          for r in results]
    return 0 if all(ok) else 1


def _probe(provider: str, scenario: str | None) -> dict[str, Any]:
    """The capability probe of the provider's model, recorded; what each role would lack."""
    from pilothouse.providers import capabilities, capability_store, provider_index

    rec = provider_index.record(provider)
    caps = capability_store.probe_provider(rec, scenario=scenario)
    lacks = {role: capabilities.lacking(caps, rec.runner, role) for role in capabilities.ROLE_NEEDS}
    return {**caps, "lacks": {role: m for role, m in lacks.items() if m}}
