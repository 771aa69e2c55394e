"""`pilothouse init`: set a repository up for pilothouse (checks first, then the records).

Above records and git: it reads the repository with git, writes `.ai/project.yaml` and
`.gitignore`, and registers the repository for the cockpit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pilothouse.core.records.project import (
    ProjectConfig,
    format_validation_error,
    load_project,
    parse_yaml,
    render_project,
)
from pilothouse.providers.errors import UserError
from pydantic import ValidationError


def _ask_gates(stdin_is_tty: bool) -> dict[str, str]:
    if not stdin_is_tty:
        raise UserError("no test command detected in this repository: pass --gate-fast CMD --gate-full CMD "
                        "(they may be the same command)")
    fast = input("Command for the fast gate (runs after each task): ").strip()
    full = input(f"Command for the full gate (runs after each merge) [{fast}]: ").strip() or fast
    if not fast:
        raise UserError("a fast gate command is required: re-run and type one, or pass --gate-fast CMD")
    return {"fast": fast, "full": full}


def _ignoring_rule(root: Path) -> tuple[str, str] | None:
    """(where, pattern) of the ignore rule that hides .ai/project.yaml from git, or None."""
    from pilothouse.core.git.worktrees import git

    out = git(root, "check-ignore", "-v", "--no-index", ".ai/project.yaml", check=False)
    m = re.match(r"(.*?):(\d+):(.*?)\t", out)
    if not m or m.group(3).startswith("!"):
        return None
    return f"{m.group(1)}:{m.group(2)}", m.group(3)


def _is_ignored(root: Path) -> bool:
    from pilothouse.core.git.worktrees import git_ok

    return git_ok(root, "check-ignore", "-q", "--no-index", ".gitignore")


def _gitignore_update(root: Path) -> str | None:
    """The new .gitignore text, or None when it already ignores .ai/runtime/ and lets the records in
    .ai/ be committed (writes nothing). A .gitignore that hides .ai (many projects ignore `.*`) gets
    `!.ai/` after it: otherwise `git add .ai/project.yaml` refuses and every builder's commit fails."""
    from pilothouse.core.records.layout import read_text

    gi = root / ".gitignore"
    if gi.is_dir():
        raise UserError(f"{gi} is a directory: remove it (git reads .gitignore as a file)")
    try:
        text = read_text(gi, str(gi))
    except FileNotFoundError:
        text = ""
    rule = _ignoring_rule(root)
    hides_ai = rule is not None and rule[0].startswith(".gitignore:")
    if not hides_ai and any(line.strip() in (".ai/runtime/", ".ai/runtime", "/.ai/runtime/", "/.ai/runtime")
                            for line in text.splitlines()):
        return None
    sep = "" if not text or text.endswith("\n") else "\n"
    if hides_ai:
        assert rule is not None
        return (f"{text}{sep}# pilothouse records are committed ({rule[1]!r} above would hide them); "
                "its runtime state is not\n!.ai/\n.ai/runtime/\n")
    return f"{text}{sep}# pilothouse runtime state (not a record)\n.ai/runtime/\n"


def init_project(root: Path | str, gates: dict[str, str] | None = None, *,
                 stdin_is_tty: bool | None = None, force: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Set a repository up for pilothouse; returns what was done (for the CLI to report). With
    `dry_run`, writes nothing: what it would write, and every gate candidate it found and why."""
    import os
    import sys

    from pilothouse.core.git.worktrees import GitError, git
    from pilothouse.core.records import repos
    from pilothouse.core.records.layout import find_repo
    from pilothouse.providers.fsutil import atomic_write_text

    layout = find_repo(Path(root))
    try:
        git(layout.root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    except GitError:
        raise UserError(f"{layout.root} has no commit yet: commit a README first "
                        "(git add README.md && git commit -m 'initial')") from None
    for key in ("user.name", "user.email"):
        if os.environ.get(f"GIT_AUTHOR_{key[5:].upper()}"):
            continue
        try:
            value = git(layout.root, "config", key)
        except GitError:
            value = ""
        if not value:
            raise UserError(f"no git author configured ({key} is unset): run "
                            f"git config --global {key} \"...\"")
    done: dict[str, Any] = {"repo": str(layout.root), "project_yaml": str(layout.project_yaml)}
    # everything is checked before anything is written: a refusal must not leave half a setup
    gitignore = _gitignore_update(layout.root)
    if layout.ai.exists() and not layout.ai.is_dir():
        raise UserError(f"{layout.ai} is a file, not a directory: move it away (pilothouse keeps its records there)")
    if layout.project_yaml.is_dir():
        raise UserError(f"{layout.project_yaml} is a directory, not a file: remove it, then run init again")
    repos.check_writable()
    text: str | None = None
    if layout.project_yaml.exists() and not force and not dry_run:
        load_project(layout)  # an existing file must at least be valid
        done["written"] = False
    else:
        from pilothouse.core.records.detect import candidates, detect, resolve_bare, share_of

        if dry_run:
            done["candidates"] = [c.to_dict() for c in candidates(layout.root)]
        if gates is None:
            found = detect(layout.root)
            gates = found.gates() if found is not None else None
            done["detected"] = gates is not None
            done["why"] = found.why if found is not None else None
            done["warnings"] = found.warnings if found is not None else []
            if gates is None:
                if dry_run:
                    raise UserError("no test command detected in this repository (nothing above runs tests): "
                                    "pass --gate-fast CMD --gate-full CMD")
                tty = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
                gates = _ask_gates(tty)
        else:
            # a bare `python`/`pytest` would be the first on the supervisor's PATH: pilothouse's own venv
            resolved = {level: resolve_bare(layout.root, cmd) for level, cmd in gates.items()}
            done["resolved"] = {level: cmd for level, cmd in resolved.items() if cmd != gates[level]}
            gates = resolved
        done["share"] = share_of(layout.root, gates)
        from pilothouse.providers import keys

        # no key: every role on the simulator, so the first job runs at once (and says what it is)
        done["sim_roles"] = not keys.configured_providers()
        text = render_project(gates, done["share"], sim_roles=done["sim_roles"])
        try:
            ProjectConfig.model_validate(parse_yaml(text, ".ai/project.yaml"))
        except ValidationError as exc:
            raise UserError(format_validation_error(exc, "--gate-fast/--gate-full")) from None
        done["written"] = not dry_run
        done["gates"] = gates
    if dry_run:
        done["gitignore_updated"] = False
        done["would_update_gitignore"] = gitignore is not None
        done["registered"] = False
        return done
    if text is not None:
        atomic_write_text(layout.project_yaml, text)
    if gitignore is not None:
        atomic_write_text(layout.root / ".gitignore", gitignore)
    done["gitignore_updated"] = gitignore is not None
    # a rule outside the repository's .gitignore (info/exclude, a global excludes file) is the
    # operator's to change: said, with the fix, instead of a refused `git add` later
    rule = _ignoring_rule(layout.root)
    done["ignored_by"] = f"{rule[0]} ({rule[1]!r})" if rule else None
    # some projects' .gitignore ignores `.*`, itself included: a plain `git add .gitignore` refuses
    done["gitignore_ignored"] = _is_ignored(layout.root)
    done["registered"] = repos.register_repo(layout.root)
    return done
