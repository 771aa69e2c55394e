"""CLI group 'init': set a repository up for pilothouse.

    pilothouse init [--gate-fast CMD --gate-full CMD] [--force] [--dry-run] [--repo PATH] [--json]
    pilothouse check [--gates] [--repo PATH] [--json]
    pilothouse gate TASK [--job JOB] [--level fast] [--repo PATH] [--json]
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

    g = sub.add_parser("gate", help="run a task's gate in its worktree, confined like the real one (try a hand "
                                    "fix before answering retry)",
                       description="Runs gate LEVEL of .ai/project.yaml in TASK's worktree, confined and with the "
                                   "shared folders (sandbox.share) exactly as the supervisor runs it, on what is "
                                   "there now (your uncommitted edits included; the gate restores what it changes "
                                   "itself). Exit 0 when it passes, 1 when it fails. It commits nothing and moves "
                                   "no task: answer the task's problem with retry to take the fix.")
    g.add_argument("task", metavar="TASK")
    g.add_argument("--job", metavar="JOB", help="the task's job (needed when two jobs have a task by that name)")
    g.add_argument("--level", default="fast", help="which gate (default: fast, the one a task's work passes)")
    g.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(func=_gate)


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
    add = ("git add .ai/project.yaml && git add -f .gitignore   # your .gitignore ignores itself"
           if done.get("gitignore_ignored") else "git add .ai/project.yaml .gitignore")
    print(f"next: commit .ai/project.yaml and .gitignore ({add}), then "
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


def _gate(args: Any) -> int:
    from pathlib import Path

    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.git.prove import counts_words
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.records.project import load_project
    from pilothouse.core.state import store
    from pilothouse.providers.errors import UserError

    layout = find_repo(args.repo)
    project = load_project(layout)
    if args.level not in project.gates:
        raise UserError(f"gate {args.level!r} is not defined in .ai/project.yaml (defined: "
                        f"{', '.join(sorted(project.gates))}): pass --level with one of them")
    if not layout.state_db.exists():
        raise UserError(f"no task {args.task!r}: no job has run in {layout.root} yet (pilothouse job status)")
    conn = store.connect(layout.state_db, readonly=True)
    try:
        rows = conn.execute("SELECT job, worktree, state FROM tasks WHERE task = ?" + (" AND job = ?" if args.job
                            else ""), (args.task, args.job) if args.job else (args.task,)).fetchall()
        open_codes = [r["code"] for r in conn.execute(
            "SELECT code FROM problems WHERE task = ? AND state = 'open'" + (" AND job = ?" if args.job else ""),
            (args.task, args.job) if args.job else (args.task,))]
    finally:
        conn.close()
    if not rows:
        raise UserError(f"no task {args.task!r}" + (f" in job {args.job!r}" if args.job else "")
                        + ": `pilothouse job status` lists the tasks")
    if len(rows) > 1:
        raise UserError(f"task {args.task!r} exists in jobs {', '.join(r['job'] for r in rows)}: pass --job NAME")
    row = rows[0]
    wt = row["worktree"]
    if not wt or not Path(wt).is_dir():
        raise UserError(f"task {args.task!r} ({row['state']}) has no worktree now: nothing to gate "
                        "(retry starts a builder on its branch)")
    from pilothouse.core.git.gates import run_gate

    res = run_gate(project, args.level, wt)
    if args.json:
        emit_json({"job": row["job"], "task": args.task, "worktree": wt, "problems": open_codes, **res.to_dict()})
        return 0 if res.passed else 1
    print(res.output_tail.rstrip()[-3000:])
    counts = counts_words(res.counts) if res.counts else "no counts (the weakened-test count checks are off)"
    print(f"gate {args.level} in {wt}: {'passed' if res.passed else 'FAILED'} — {counts} in {res.duration_s:.1f}s"
          + (f", ran {res.toolchain}" if res.toolchain else ""))
    if not res.passed and res.reason:
        print(f"  {res.reason}")
    for code in open_codes:
        print(f"next: pilothouse problem act {code} retry   # commits what you left in the worktree, then gates it")
    return 0 if res.passed else 1
