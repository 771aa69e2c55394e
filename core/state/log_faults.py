"""What can be wrong with events.jsonl itself, rather than with a line of it, and how it is said: a
directory, a FIFO or a device where the log should be. `open_log` is the one door every reader and the
writer go through, so none of them can hang on a FIFO or print a traceback for a directory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from pilothouse.providers.errors import UserError


class EventLogUnusable(UserError, OSError):
    """events.jsonl is there but is no file a log can be kept in (a directory, a FIFO, a device): one
    line naming it and the fix. An OSError too, so a view that tolerates a log it cannot read goes on
    tolerating it."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


def unusable_log(path: Path, kind: str) -> EventLogUnusable:
    import shlex

    where = shlex.quote(str(path))
    return EventLogUnusable(f"{path} is {kind}, not the event log: move it aside (mv {where} {where}.aside) "
                            "and run this again; the next event starts a new log there")


def open_log(path: Path, writing: bool = False) -> BinaryIO | None:
    """The event log opened to read ('rb'), or to append and read ('ab+', unbuffered, made if missing);
    None when there is none to read. Every reader and the writer open it here: without blocking,
    because opening a FIFO put in its place would wait forever for a writer, and then refused unless
    what was opened is a regular file (checked on the descriptor, so nothing swapped in between
    the check and the read)."""
    flags = os.O_NONBLOCK | os.O_CLOEXEC | (os.O_RDWR | os.O_APPEND | os.O_CREAT if writing else os.O_RDONLY)
    try:
        fd = os.open(path, flags, 0o666)
    except FileNotFoundError:
        if writing:
            raise
        return None
    except IsADirectoryError:  # a directory cannot even be opened to write
        raise unusable_log(path, "a directory") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a device with nothing behind it)
            raise unusable_log(path, _kind(os.stat(path).st_mode)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise unusable_log(path, _kind(mode))
        os.set_blocking(fd, True)  # a regular file never blocks: give it back the usual semantics
        return os.fdopen(fd, "ab+" if writing else "rb", buffering=0 if writing else -1)
    except BaseException:
        os.close(fd)
        raise


def skip_notice(path: Path, skipped: int, first: str | None) -> str:
    """The one sentence every reader says (once) about the lines of the log it skipped."""
    if skipped == 1:
        return f"{path}: skipped 1 line that is not an event ({first}); the rest is read as usual"
    return f"{path}: skipped {skipped} lines that are not events (first: {first}); the rest is read as usual"
