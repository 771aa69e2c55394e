"""Errors shared by every layer.

A UserError is a mistake the user can fix; the CLI prints it as one line (no traceback)
and exits 2. Its message names the file, line or field and says what to do.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input or setup; message is one line with the fix."""

    exit_code = 2


class NotInstalled(UserError):
    """A runner binary or system tool is missing."""


def describe(exc: BaseException) -> str:
    """For events and problems: a user's mistake is its own message; anything else says its type too."""
    return str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
