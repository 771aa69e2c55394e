"""CLI: `pilothouse usage [JOB] [--by role|task|provider|job] [--json]` — where the tokens went.

With a job, its runs by role (planner, builders, retries, resumes, reviewers: tokens, cost, share)
or by task; without one, every run by provider or by job. Counts carry their label: `~` estimated,
`?`/`≥` where some turns were counted by nobody (docs/contracts.md, Usage).
"""

from __future__ import annotations

import argparse

from pilothouse.core.commands._out import add_json_flag, emit_json, print_table

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

BY = ("role", "task", "provider", "job")


def register(sub: Any) -> None:
    p = sub.add_parser("usage", help="tokens and cost: a job's by role or task, or all runs by provider or job",
                       description="Where the tokens went. With JOB: by role (default) or by task; without: "
                                   "by provider (default) or by job.")
    p.add_argument("job", nargs="?", metavar="JOB", help="a job of this repository")
    p.add_argument("--by", choices=BY, help="role or task (with JOB); provider or job (without)")
    p.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    add_json_flag(p)
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: argparse.Namespace) -> int:
    from pilothouse.core.queries import usage
    from pilothouse.core.queries.problems import StoreReader
    from pilothouse.core.records.jobs import load_job
    from pilothouse.core.records.layout import find_repo
    from pilothouse.providers.errors import UserError
    from pilothouse.providers.usage import cost_label, cost_text, tokens_text

    layout = find_repo(args.repo)
    by = args.by or ("role" if args.job else "provider")
    if args.job and by in ("provider", "job"):
        raise UserError(f"usage --by {by} sums every run; drop JOB, or use --by role or --by task with it")
    if not args.job and by in ("role", "task"):
        raise UserError(f"usage --by {by} needs a job: pilothouse usage JOB --by {by}")
    if args.job:
        load_job(layout, args.job)  # one line if there is no such job, or its record is damaged
    reader = StoreReader(layout)
    if by == "role":
        # every cost with the label it is shown with: a simulator's $0 says so (cost_label)
        rows: list[dict[str, Any]] = [
            {"role": r.role, "runs": r.runs, "running": r.running, "tokens": r.tokens, "usage": r.usage,
             "share": round(r.share, 4), "cost_usd": round(r.cost_usd, 6),
             "cost_label": cost_label(r.usage, r.providers)} for r in usage.by_role(reader, args.job)]
        key = "role"
    else:
        got = usage.by_task(reader, args.job) if by == "task" else (
            usage.by_provider(reader) if by == "provider" else usage.by_job(reader))
        total = sum(u.tokens for u in got) or 0
        rows = [{by: u.key, "runs": u.runs, "running": u.running, "tokens": u.tokens,
                 "share": round(u.tokens / total, 4) if total else 0.0, "cost_usd": round(u.cost_usd, 6),
                 "usage": u.usage, "cost_label": cost_label(u.usage, u.providers)} for u in got]
        key = by
    if args.json:
        emit_json({"job": args.job, "by": by, "rows": rows, "tokens": sum(r["tokens"] for r in rows),
                   "cost_usd": round(sum(r["cost_usd"] for r in rows), 6)})
        return 0
    if not rows:
        print(f"no runs yet{' for job ' + args.job if args.job else ''}")
        return 0
    from pilothouse.providers.registry import labelled

    print_table([key.upper(), "RUNS", "TOKENS", "SHARE", "COST"],
                [[labelled(str(r[key])) if key == "provider" else str(r[key]), str(r["runs"]) + (f" ({r['running']} running)" if r["running"] else ""),
                  tokens_text(r["tokens"], r.get("usage")), f"{r['share'] * 100:.0f}%",
                  cost_text(r["cost_usd"], r["cost_label"])]
                 for r in rows])
    return 0
