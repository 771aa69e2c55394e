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


def single_line(text: str) -> str:
    """`text` with every line break and other control character escaped (`\\n`), so a value quoted
    from the user's file cannot split a one-line error."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def describe(exc: BaseException) -> str:
    """For events and problems: a user's mistake is its own message; anything else says its type too."""
    return str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"


_DISK_FIXES = {
    "ENOSPC": "no space left on the device: free some space, then run it again",
    "EDQUOT": "the disk quota is used up: free some space, then run it again",
    "EROFS": "the file system is read-only: remount it read-write (or work in a writable copy)",
    "EACCES": "permission denied: check the owner and mode of the path",
    "EPERM": "not permitted: check the owner and mode of the path",
    # not the disk's, but the same kind of answer: a path the file system cannot take
    "ENAMETOOLONG": "a name in the path is longer than the file system allows: shorten it",
    "ELOOP": "too many levels of symbolic links: point the link at a real file",
}
_SQLITE_FIXES = {
    "database or disk is full": "no space left on the device: free some space, then run it again",
    "readonly database": "the file system (or state.db) is read-only: make it writable, then run it again",
    "disk I/O error": "the disk failed a read or write: check it, then run it again",
}


def disk_error_line(exc: BaseException) -> str | None:
    """One line for what a full, read-only or refusing disk did (naming the path when there is
    one), or None when `exc` is not such an error (then it is a bug and keeps its traceback)."""
    import errno

    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, "")
        fix = _DISK_FIXES.get(name)
        if fix is None:
            return None
        where = exc.filename if exc.filename is not None else "a file"
        return f"{where}: {fix}"
    if type(exc).__module__ == "sqlite3":
        text = str(exc)
        for needle, fix in _SQLITE_FIXES.items():
            if needle in text:
                return f".ai/runtime/state.db: {text}: {fix}"
    return None
