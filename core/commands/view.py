"""CLI group 'view': `pilothouse` / `pilothouse view [REPO]` opens the cockpit.

REPO is a path or the name of a registered repository. Without it: the repository around the
current directory, else the only registered one, else a picker. Textual is imported only here,
inside the handler, so `pilothouse --help` never pays for it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("view", help="open the cockpit (also: pilothouse with no command)",
                       description="Open the terminal cockpit on a repository. Works over SSH in 80x24; "
                       "`pilothouse serve` serves it to a browser.")
    p.add_argument("repo", nargs="?", metavar="REPO", help="repository path or registered name")
    p.add_argument("--keys", action="store_true",
                   help="print every binding id with its key (after your keymap in cockpit.yaml) and exit")
    p.add_argument("--json", action="store_true", help="with --keys: as JSON")
    p.set_defaults(func=_view)


def _registered() -> list[Path]:
    from pathlib import Path

    try:
        from pilothouse.core.records import repos
    except ImportError:
        return []
    out: list[Path] = []
    for item in repos.list_repos():
        # a Path first: Path has a `root` attribute too ("/"), which is not the repository
        raw: Any = None
        if isinstance(item, str | Path):
            raw = item
        elif isinstance(item, dict):
            raw = item.get("root") or item.get("path")
        else:
            raw = getattr(item, "root", None) or getattr(item, "path", None)
        if raw is not None and Path(raw).exists():
            path = Path(raw)
            if path not in out:
                out.append(path)
    return out


def resolve(repo: str | None) -> tuple[Any, list[Any]]:
    """(layout, []) when one repository is meant, (None, choices) when the operator must pick."""
    from pathlib import Path

    from pilothouse.core.records.layout import RepoLayout, find_repo
    from pilothouse.providers.errors import UserError

    if repo:
        path = Path(repo).expanduser()
        if path.exists():
            return find_repo(path), []
        named = [p for p in _registered() if p.name == repo]
        if len(named) == 1:
            return RepoLayout(named[0]), []
        raise UserError(f"no repository {repo!r}: give a path, or one of the registered names "
                        "(`pilothouse init` registers a repository)")
    try:
        return find_repo(), []
    except UserError:
        known = _registered()
        if len(known) == 1:
            return RepoLayout(known[0]), []
        if known:
            return None, [RepoLayout(p) for p in known]
        raise UserError("not inside a git repository and none is registered: cd into one, pass REPO, "
                        "or run `pilothouse init` in a repository") from None


def _keys(as_json: bool) -> int:
    import json
    import sys

    from pilothouse.tui.app import binding_scopes
    from pilothouse.tui.config import keys_report

    report = keys_report(binding_scopes)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(f"# {report['file']}" + (f" · theme {report['theme']}" if report["theme"] else ""))
        print(f"{'binding id':<20} {'keys':<14} {'default':<14} {'where':<28} action")
        for row in report["keys"]:
            keys, default = " ".join(row["keys"]), " ".join(row["default"])
            print(f"{row['id']:<20} {keys:<14} {default if default != keys else '':<14} "
                  f"{', '.join(row['scopes']):<28} {row['action']}")
    for line in report["problems"]:
        print(f"pilothouse: {line}", file=sys.stderr)
    return 1 if report["problems"] else 0


def _view(args: Any) -> int:
    if args.keys:
        return _keys(args.json)
    if args.json:
        from pilothouse.providers.errors import UserError

        raise UserError("view: --json goes with --keys (the cockpit itself has no JSON)")
    return open_cockpit(args.repo)


def open_cockpit(repo: str | None) -> int:
    """The one way into the cockpit: `pilothouse`, `pilothouse view`, `pilothouse demo` (and each browser
    tab of `pilothouse serve`, which runs `pilothouse view`) all open it here."""
    layout, choices = resolve(repo)
    from pilothouse.tui.app import run_cockpit

    return run_cockpit(layout, choices)
