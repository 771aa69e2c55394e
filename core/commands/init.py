"""CLI group 'init': set a repository up for pilothouse.

    pilothouse init [--gate-fast CMD --gate-full CMD] [--force] [--dry-run] [--repo PATH] [--json]
    pilothouse check [--repo PATH] [--json]
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("init", help="set this repository up: .ai/project.yaml, .gitignore, repo list",
                       description="Writes .ai/project.yaml (workflow feature, review once, gates fast and "
                                   "full detected from the repo: pytest, npm test; else asked for, or given "
                                   "with --gate-fast/--gate-full), ignores .ai/runtime/ in .gitignore and "
                                   "registers the repository for the cockpit. Needs a commit and a git author.")
    p.add_argument("--gate-fast", metavar="CMD", help="command for the fast gate (after each task)")
    p.add_argument("--gate-full", metavar="CMD", help="command for the full gate (after each merge; "
                                                      "default: the fast one)")
    p.add_argument("--force", action="store_true", help="rewrite an existing .ai/project.yaml")
    p.add_argument("--dry-run", action="store_true", help="write nothing: show every gate candidate found, "
                                                          "which one would be chosen and why")
    p.add_argument("--no-prove", action="store_true", help="do not run the gates once on the base commit "
                                                           "(they are by default: pass/fail, counts, time)")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_init)

    c = sub.add_parser("check", help="check the settings against what they name (providers, scenario, "
                                     "tasks.yaml) before a job runs; job start runs it too")
    c.add_argument("--gates", action="store_true", help="also run each gate once on the base commit, confined "
                                                        "(slow: as long as your tests take)")
    c.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=_check)


def _check(args: Any) -> int:
    import sys

    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records.check import check_repo
    from pilothouse.core.records.layout import find_repo

    layout = find_repo(args.repo)
    found = check_repo(layout)
    proofs = _prove(layout) if args.gates and not found else []
    from pilothouse.core.git.prove import findings

    found += findings(proofs)
    if args.json:
        emit_json({"repo": str(layout.root), "ok": not found, "findings": found,
                   "gates_proved": bool(proofs), "proofs": [p.to_dict() for p in proofs]})
        return 2 if found else 0
    _print_proofs(proofs)
    if found:
        for line in found:
            print(f"pilothouse: {line}", file=sys.stderr)
    elif proofs:
        print(f"{layout.root}: settings fit to run a job; the gates pass on the base commit")
    else:
        print(f"{layout.root}: settings fit to run a job (gates not run: `pilothouse check --gates` runs each "
              "once on the base commit)")
    return 2 if found else 0


def _prove(layout: Any) -> list[Any]:
    from pilothouse.core.git.prove import prove
    from pilothouse.core.records.project import load_project

    return prove(layout, load_project(layout))


def _print_proofs(proofs: list[Any]) -> None:
    for proof in proofs:
        print(("  " if proof.finding is None else "  ✗ ") + proof.line())
        for note in proof.notes:
            print(f"    note: {note}")


def _init(args: Any) -> int:
    import os

    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.repo_setup import init_project
    from pilothouse.providers.errors import UserError

    gates = None
    if args.gate_fast or args.gate_full:
        if not args.gate_fast:
            raise UserError("--gate-full given without --gate-fast: pass both (they may be the same command)")
        gates = {"fast": args.gate_fast, "full": args.gate_full or args.gate_fast}
    done = init_project(args.repo or os.getcwd(), gates, force=args.force, dry_run=args.dry_run)
    if not args.dry_run and not args.no_prove:
        from pilothouse.core.records.layout import find_repo

        done["proofs"] = _prove(find_repo(done["repo"]))
    if args.json:
        emit_json({**done, "proofs": [p.to_dict() for p in done.get("proofs") or []]})
        return 0
    if args.dry_run:
        _print_candidates(done)
        return 0
    if done["written"]:
        how = "detected" if done.get("detected") else "given"
        print(f"wrote {done['project_yaml']} (gates {how}: fast = {done['gates']['fast']!r}, "
              f"full = {done['gates']['full']!r})")
        if done.get("why"):
            print(f"  found: {done['why']} (change them in .ai/project.yaml if your CI runs more)")
        for level, cmd in (done.get("resolved") or {}).items():
            print(f"  gates.{level}: the bare program resolved to the repository's virtualenv: {cmd}")
        for warning in done.get("warnings") or []:
            print(f"  warning: {warning}")
        if done.get("sim_roles"):
            print("  roles: sim (simulator) — no model key is configured, so every role runs on the simulator's "
                  "scripted replies, not a real model; script it for this repository (docs/scenarios.md), or "
                  "store a key (pilothouse key set glm) and name that provider in model_policy")
        if done.get("share"):
            print(f"  sandbox.share: {', '.join(done['share'])} (read-only in every worktree's sandbox, running the "
                  "worktree's code: no install per worktree; install again here after changing the lockfile)")
    else:
        print(f"kept {done['project_yaml']} (it exists; --force rewrites it)")
    if done.get("proofs") is not None:
        print("gates run once on the base commit, confined (--no-prove skips this):")
        _print_proofs(done["proofs"])
        for proof in done["proofs"]:
            if proof.finding:
                print(f"warning: {proof.finding}")
    if done["gitignore_updated"]:
        print("updated .gitignore: .ai/runtime/ is ignored, the records in .ai/ are not")
    if done.get("ignored_by"):
        print(f"warning: git ignores .ai/project.yaml because of {done['ignored_by']}: remove that rule, or "
              "commit the records with git add -f .ai/ (builders' commits need .ai/ not ignored)")
    print(("registered " if done["registered"] else "already registered: ") + done["repo"])
    print("next: commit .ai/project.yaml and .gitignore, then "
          "`pilothouse job create NAME --request-file request.md`")
    return 0


def _print_candidates(done: dict[str, Any]) -> None:
    """`init --dry-run`: what was found where, best first, and what init would write."""
    print(f"gate candidates in {done['repo']} (best first; a step that runs no tests is never chosen):")
    for c in done.get("candidates") or []:
        mark = "  " if not (c["command"] and c["runs_tests"]) else "* " if c["command"] == done["gates"]["fast"] else "+ "
        print(f"{mark}{c['where']}: {c['command'] or '(not a gate)'} — {c['why']}")
    how = "detected" if done.get("detected") else "given"
    print(f"would write {done['project_yaml']} (gates {how}: fast = {done['gates']['fast']!r}, "
          f"full = {done['gates']['full']!r})")
    if done.get("why"):
        print(f"  chosen: {done['why']}")
    for warning in done.get("warnings") or []:
        print(f"  warning: {warning}")
    if done.get("share"):
        print(f"  sandbox.share: {', '.join(done['share'])}")
    print("nothing written (--dry-run)")
