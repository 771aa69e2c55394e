"""What every way in (the CLI, the MCP server, the cockpit, email) checks of a name or a value a
person typed before anything builds a path from it: no NUL or control characters, and bounded.

The limits are the file system's (a path component of 255 bytes, a path of 4096) and one for a
free-form argument; a job's own name limit (63) is records.jobs.validate_name's.
"""

from __future__ import annotations

from pilothouse.providers.errors import UserError

MAX_COMPONENT = 255
MAX_PATH = 4096
MAX_ARG = 64 * 1024
# shown of a refused value: enough to recognise it, never the whole of a megabyte
ECHO = 60


def shown(value: str) -> str:
    """`value` quoted for an error message, cut to ECHO characters and printable."""
    text = "".join(c if c.isprintable() else "?" for c in value[:ECHO])
    return repr(text) + (f"… ({len(value)} characters)" if len(value) > ECHO else "")


def check_text(value: str, what: str, limit: int = MAX_ARG, *, lines: bool = False) -> str:
    """`value`, or UserError when it holds a NUL or a control character (newlines and tabs only
    with `lines`) or is longer than `limit` characters."""
    if len(value) > limit:
        raise UserError(f"{what} {shown(value)} is longer than the limit of {limit} characters: shorten it")
    allowed = "\n\t\r" if lines else ""
    bad = next((c for c in value if (ord(c) < 32 or ord(c) == 127) and c not in allowed), None)
    if bad is not None:
        name = "a NUL byte" if bad == "\0" else f"the control character {bad!r}"
        raise UserError(f"{what} {shown(value)} contains {name}: remove it")
    return value


def check_path(value: str, what: str) -> str:
    """`value` as a path a command may open: no NUL, no control character, within the file
    system's limits (else ENAMETOOLONG would surface as a traceback)."""
    check_text(value, what, MAX_PATH)
    long = next((p for p in value.split("/") if len(p.encode()) > MAX_COMPONENT), None)
    if long is not None:
        raise UserError(f"{what} {shown(value)}: a name in it is longer than {MAX_COMPONENT} bytes: shorten it")
    return value


def check_host(value: str, what: str = "--host") -> str:
    """A host name or address to listen on: at most 253 characters, labels of at most 63."""
    check_text(value, what, 253)
    if any(len(label) > 63 for label in value.split(".")) or not value.strip():
        raise UserError(f"{what} {shown(value)} is not a host name or address (labels of at most 63 "
                        "characters): give one such as 127.0.0.1 or localhost")
    return value
