"""Where a repository's pilothouse records and runtime state live (docs/own-repo.md, "Where things
live"), and how a user's file is read."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pilothouse.providers.errors import UserError


@dataclass(frozen=True)
class RepoLayout:
    root: Path

    @property
    def ai(self) -> Path:
        return self.root / ".ai"

    @property
    def project_yaml(self) -> Path:
        return self.ai / "project.yaml"

    @property
    def tasks_yaml(self) -> Path:
        return self.ai / "tasks.yaml"

    @property
    def jobs_dir(self) -> Path:
        return self.ai / "jobs"

    @property
    def skills_dir(self) -> Path:
        return self.ai / "skills"

    @property
    def runtime(self) -> Path:
        return self.ai / "runtime"

    @property
    def state_db(self) -> Path:
        return self.runtime / "state.db"

    @property
    def events(self) -> Path:
        return self.runtime / "events.jsonl"

    @property
    def supervisor_log(self) -> Path:
        return self.runtime / "supervisor.log"

    @property
    def attachments(self) -> Path:
        return self.runtime / "attachments"


def require_set_up(layout: RepoLayout) -> None:
    """Refuse a repository pilothouse was never set up in (no project.yaml, no job, no event log) in
    one line saying so: a reader would otherwise name a log that was never there, or suggest a
    `job create` that would refuse for the same reason."""
    if layout.project_yaml.exists() or layout.jobs_dir.is_dir() or os.path.lexists(layout.events):
        return
    raise UserError(f"{layout.root} is not set up for pilothouse (no .ai/project.yaml): run `pilothouse init`")


def worktrees_base() -> Path:
    """Where every repository's task worktrees and integration checkout live (user data dir)."""
    from pilothouse.providers import paths

    return paths.data_dir() / "worktrees"


def main_layout(layout: RepoLayout) -> RepoLayout:
    """The operator's checkout for a layout rooted in one of pilothouse's own worktrees.

    A task worktree (or the integration checkout) holds a copy of .ai/ its worker can rewrite, and
    none of the runtime state: the records, the store, the events and the settings are the main
    checkout's. The operator's own linked worktrees are theirs and stay repositories of their own.
    """
    root = layout.root.resolve()
    if not root.is_relative_to(worktrees_base().resolve()):
        return layout
    from pilothouse.providers.confine import trusted_project_root

    main = trusted_project_root(root)
    if main == root:
        raise UserError(f"{layout.root} is a pilothouse worktree whose repository cannot be found: "
                        "run pilothouse in the repository itself (pass --repo PATH)")
    return RepoLayout(main)


def read_text(path: Path | str, what: str, limit: int | None = None, *, not_text_fix: str = "save it as UTF-8",
              too_long_fix: str = "shorten it") -> str:
    """A text file the user gave or keeps ('-': stdin), every way it can be unreadable a UserError
    starting with `what` (e.g. "--file tasks.yaml"). A missing file raises FileNotFoundError: what
    to say then depends on the caller. Only a regular file is read (a FIFO or a device is refused,
    never waited on), at most `limit` characters (4 MiB without one): /dev/zero or a runaway file
    costs nothing. Not UTF-8: the message gives the byte offset."""
    import sys

    from pilothouse.providers import userfile

    if str(path) == "-":
        try:
            text = sys.stdin.read(-1 if limit is None else limit + 1)
        except UnicodeDecodeError as exc:
            raise UserError(f"{what}: not UTF-8 text (byte {exc.start}): {not_text_fix}") from None
    else:
        cap = userfile.MAX_BYTES if limit is None else 4 * (limit + 1)  # a character is at most 4 bytes
        text = userfile.read_text(path, what, cap, not_text_fix=not_text_fix, too_long_fix=too_long_fix)
    if limit is not None and len(text) > limit:
        raise UserError(f"{what}: longer than the limit of {limit} characters: {too_long_fix}")
    return text


def find_repo(start: Path | str | None = None) -> RepoLayout:
    """The repository containing `start` (default: the current directory); inside one of
    pilothouse's task worktrees, the repository it was made from (see main_layout)."""
    if start is not None and str(start):
        start = Path(start).expanduser()
        # subprocess would only say NotADirectoryError / FileNotFoundError about its cwd
        if start.exists() and not start.is_dir():
            raise UserError(f"{start}: not a directory: pass the repository's directory")
        if not start.exists():
            raise UserError(f"{start}: no such directory: pass the repository's directory")
    here = Path(start or os.getcwd()).resolve()
    for cand in (here, *here.parents):
        dotgit = cand / ".git"
        if dotgit.is_file():
            return main_layout(RepoLayout(cand))
        if dotgit.exists():
            return RepoLayout(cand)
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True,
                             text=True, check=True).stdout.strip()
        return main_layout(RepoLayout(Path(out)))
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise UserError(f"{here} is not inside a git repository: cd into one, or pass --repo PATH") from None
