"""CLI group 'confine': `probe` (prove the worker sandbox holds) and `scan-secrets`.

Stdlib only at module top; providers.probe / providers.scan load in the handlers.
"""

from __future__ import annotations

import sys

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("probe", help="prove that worker confinement (bubblewrap) holds on this machine")
    p.add_argument("--runner", help="also check that this runner's binary starts confined")
    add_json_flag(p)
    p.set_defaults(func=cmd_probe)

    s = sub.add_parser("scan-secrets", help="look for leaked keys in a repo's .ai, its pilothouse branches, your run logs "
                       "and run folders")
    s.add_argument("path", nargs="?", help="repository (its .ai and pilothouse's branches are scanned) or a file/dir; "
                   "default: the repository around the current directory")
    add_json_flag(s)
    s.set_defaults(func=cmd_scan)


def cmd_probe(args: Any) -> int:
    from pilothouse.providers import confine
    from pilothouse.providers.confine import probe

    ok, reason = confine.available()
    if not ok:
        if args.json:
            emit_json({"ok": False, "reason": reason, "results": []})
        else:
            print(f"pilothouse: confinement unavailable: {reason}", file=sys.stderr)
        return 1
    record = probe.run_probe(args.runner)
    if args.json:
        emit_json(record)
        return 0 if record["ok"] else 1
    rows = [[r["check"], r["expect"], r["child"], "yes" if r["reached_host"] else "no",
             "ok" if r["pass"] else "FAILED"] for r in record["results"]]
    print_table(["CHECK", "EXPECT", "INSIDE", "ON HOST", "RESULT"], rows)
    bw = record["bwrap"]
    sha = (bw.get("sha256") or "")[:12]
    if record["ok"]:
        print(f"\nconfinement works: bwrap {bw.get('version')} ({bw.get('path')}, sha256 {sha}…); "
              f"recorded in {probe.record_path()}")
        return 0
    print(f"\nconfinement FAILED: {record['reason']}. Writers (code/resume/test) will not launch.",
          file=sys.stderr)
    return 1


def cmd_scan(args: Any) -> int:
    from pathlib import Path

    from pilothouse.providers import scan
    from pilothouse.providers.errors import UserError

    target = Path(args.path).expanduser() if args.path else None
    if target is not None and not target.exists():
        raise UserError(f"scan-secrets: {target} does not exist; give a repository, directory or file")
    from pilothouse.providers.redact import redactor_for_configured

    roots = scan.default_roots(target)
    redactor = redactor_for_configured()
    skipped: list[str] = []
    hits, count = scan.scan(roots, redactor=redactor, on_skip=lambda s: skipped.append(s.line()))
    hits += scan.link_hits(roots, redactor)
    repo, branches, commits = scan.repo_of(target), [], 0
    if repo is not None:
        ours, others = scan.branch_split(repo, _integration_branch(repo))
        found, commits = scan.scan_commits(repo, ours, others, redactor)
        hits += found
        branches = [scan.masked(b.removeprefix("refs/heads/"), redactor) for b in ours]  # a name can hold a key
    if args.json:
        emit_json({"roots": [str(r) for r in roots], "files": count, "branches": branches, "commits": commits,
                   "hits": [h.as_dict() for h in hits], "skipped": skipped})
    else:
        for line in skipped:
            if "symbolic link" not in line:  # links are never followed, and too many to list
                print(f"pilothouse: {line}", file=sys.stderr)
        for h in hits:
            print(f"{h.path}:{h.line}: {h.kind}")
        where = ", ".join(str(r) for r in roots) or "nothing (no .ai, no logs yet)"
        also = f" and {commits} commit(s) on {len(branches)} pilothouse branch(es)" if branches else ""
        verdict = f"{len(hits)} possible secret(s)" if hits else "no secrets found"
        print(f"scanned {count} file(s) in {where}{also}: {verdict}", file=sys.stderr if hits else sys.stdout)
    return 1 if hits else 0


def _integration_branch(repo: Path) -> str:
    """The project's integration branch; the default when its project.yaml cannot be read (a scan
    must not stop at a broken config)."""
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.records.project import load_project
    from pilothouse.providers.errors import UserError

    try:
        return load_project(RepoLayout(repo)).integration_branch
    except (UserError, OSError, ValueError):
        return "pilothouse/integration"
