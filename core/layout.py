"""Where a repository's pilothouse records and runtime state live (DESIGN §3)."""

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


def find_repo(start: Path | str | None = None) -> RepoLayout:
    """The git work tree containing `start` (default: the current directory)."""
    here = Path(start or os.getcwd()).resolve()
    for cand in (here, *here.parents):
        if (cand / ".git").exists():
            return RepoLayout(cand)
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True,
                             text=True, check=True).stdout.strip()
        return RepoLayout(Path(out))
    except (subprocess.CalledProcessError, FileNotFoundError):
        raise UserError(f"{here} is not inside a git repository: cd into one, or pass --repo PATH") from None
