"""A job's name: the rule every entry point checks before a name becomes part of a path or a branch.

Apart from jobs.py so that checking a name costs no pydantic: the CLI checks `--job` on every
command, `pilothouse dispatch` included, whose start-up is on the scheduler's path.
"""

from __future__ import annotations

import re

from pilothouse.providers.errors import UserError

MAX_NAME_CHARS = 63
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def validate_name(name: str) -> str:
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise UserError(f"job name {name[:20]!r}... is {len(name)} characters: the limit is {MAX_NAME_CHARS} "
                        "(it becomes part of branch and file names): use a shorter name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UserError(f"job name {name!r} is not valid: use lowercase letters, digits and '-', "
                        f"starting with a letter or digit, at most {MAX_NAME_CHARS} characters (e.g. first-draft)")
    return name
