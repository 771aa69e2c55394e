"""CLI group 'view': `pilothouse` / `pilothouse view [REPO]` opens the cockpit.

REPO is a path or the name of a registered repository. Without it: the repository around the
current directory, else the only registered one, else a picker. Textual is imported only here,
inside the handler, so `pilothouse --help` never pays for it.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("view", help="open the cockpit (also: pilothouse with no command)",
                       description="Open the terminal cockpit on a repository. Works over SSH in 80x24; "
                       "`pilothouse serve` serves it to a browser.")
    p.add_argument("repo", nargs="?", metavar="REPO", help="repository path or registered name")
    p.set_defaults(func=_view)


def _registered() -> list[Path]:
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


def _view(args: Any) -> int:
    layout, choices = resolve(args.repo)
    from pilothouse.tui.app import run_cockpit

    return run_cockpit(layout, choices)
