"""The `pilothouse` / `ph` command line.

Kept thin and cheap to import: each command group lives in `core/commands/<group>.py`, whose
module imports nothing heavy at top level; handlers import pydantic, GitPython, Textual and
friends inside the function that needs them, so `pilothouse --help` pays for none of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

TYPE_CHECKING = False  # typing itself costs ~2 ms at startup; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

# Order is the order of `pilothouse --help`. Each module defines register(subparsers).
GROUPS = (
    "init", "jobs", "tasks", "supervise", "ship", "problems", "usage", "report", "replay", "models", "live", "view", "serve", "demo", "mcp",
    "dispatch", "providers", "keys", "notify", "status", "install", "sim", "confine", "maintain",
)

# the dispatch engine's and the per-user settings' commands live in core/commands/workers/, the job
# commands one level up
WORKER_GROUPS = frozenset({"dispatch", "providers", "keys", "notify", "install", "sim", "confine", "maintain"})
# read-only reports on what jobs did live in core/commands/reports/
REPORT_GROUPS = frozenset({"usage", "report", "replay"})


def _package(group: str) -> str:
    return "workers." if group in WORKER_GROUPS else ("reports." if group in REPORT_GROUPS else "")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given `command` (a name or alias), only that command's parser is real.

    Every group still registers (that is how --help and argparse's "invalid choice" learn each
    command's name and help), but the others get a stand-in that ignores their arguments:
    building ~50 real sub-parsers costs ~10 ms of gettext look-ups and formatters per run.
    """
    from pilothouse import __version__

    # pilothouse speaks English: argparse's stock phrases ("usage:", "options") stay English too,
    # rather than each costing a gettext catalogue search (and the locale module) on every run
    argparse._ = _english  # type: ignore[attr-defined]
    argparse.ngettext = _english_n  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser(
        prog="pilothouse",
        description="Dispatch bounded tasks to isolated LLM workers and supervise whole jobs. "
        "With no command, opens the cockpit.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"pilothouse {__version__}")
    sub: Any = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is not None:
        sub = _OneCommand(sub, command)
    for group in GROUPS:
        importlib.import_module(f"pilothouse.core.commands.{_package(group)}{group}").register(sub)
    return parser


def _english(message: str) -> str:
    return message


def _english_n(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


class _Formatter(argparse.HelpFormatter):
    """argparse's own, told the terminal's width: left to find it, argparse imports shutil (and
    with it zlib, bz2 and lzma) each run, since it builds a formatter for every option it adds."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, width or _columns() - 2)


def _columns() -> int:
    """shutil.get_terminal_size's answer: $COLUMNS, else the terminal's, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Unbuilt:
    """Stands in for the parser of a command this invocation does not run: takes any call."""

    def __getattr__(self, name: str) -> _Unbuilt:
        return self

    def __call__(self, *args: object, **kwargs: object) -> _Unbuilt:
        return self

    def __iter__(self) -> Iterator[object]:
        return iter(())


class _OneCommand:
    """The top-level subparsers action, building a real parser only for `command`."""

    def __init__(self, action: Any, command: str) -> None:
        self._action = action
        self._command = command

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        aliases = tuple(kwargs.get("aliases", ()))
        pseudo = getattr(self._action, "_ChoicesPseudoAction", None)
        if self._command in (name, *aliases) or pseudo is None:
            return self._action.add_parser(name, **kwargs)
        # what add_parser records for --help and the choices check, without the parser itself
        if "help" in kwargs:
            self._action._choices_actions.append(pseudo(name, aliases, kwargs["help"]))
        for n in (name, *aliases):
            self._action._name_parser_map[n] = None
        return _Unbuilt()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._action, name)


class InertOut:
    """stdout or stderr of a command: everything written passes providers.untrusted.inert, a pipe
    included (`| less -R` or a log `cat` later would still obey an escape sequence). A command's own
    text holds none; what it quotes of a worker's (event text, a report, a name) loses them here
    even where its formatter forgot. JSON output is unaffected: json.dumps writes controls as \\u escapes."""

    def __init__(self, stream: Any) -> None:
        from pilothouse.providers.untrusted import inert  # imported when first needed (a small start)

        self._stream = stream
        self._inert = inert

    def write(self, text: str) -> int:
        return self._stream.write(self._inert(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# options naming a job, a scenario or a host: checked here, where they enter, before any command
# builds a path or an address from one (argparse's `type=` would have to be repeated on each)
_JOB_OPTS = ("job",)
_PATH_OPTS = ("scenario", "jobs", "repo", "dir", "request_file", "acceptance_file", "path", "file")


def _check_args(args: Any) -> None:
    from pilothouse.providers import argcheck

    for key, value in vars(args).items():
        if key == "func" or value is None:
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if not isinstance(v, str):
                continue
            opt = "--" + key.replace("_", "-")
            if key in _PATH_OPTS:
                argcheck.check_path(v, key if key in ("path", "file") else opt)
            elif key == "host":
                argcheck.check_host(v)
            else:
                # words (a hint, a decision) may span lines; nothing may carry a NUL or escape codes
                argcheck.check_text(v, opt if key not in ("name", "words", "code") else key, lines=True)
    name = getattr(args, "name", None)
    if args.command in ("job", "ship") and isinstance(name, str):
        from pilothouse.core.records.names import validate_name

        validate_name(name)
    for key in _JOB_OPTS:
        job = getattr(args, key, None)
        if isinstance(job, str):
            from pilothouse.core.records.names import validate_name

            validate_name(job)


def main(argv: list[str] | None = None) -> int:
    from pilothouse.providers.errors import UserError

    argv = sys.argv[1:] if argv is None else list(argv)
    # the command is the first word that is not an option (the top level has no valued options)
    command = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(command)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        if args.command is None:
            # bare `pilothouse` opens the cockpit
            args = build_parser("view").parse_args(["view", *argv])
            func = args.func
        else:
            parser.parse_args([args.command, "--help"])
            return 2
    if args.command not in (None, "view", "mcp", "serve"):
        # the cockpit draws through its own filter; mcp speaks JSON-RPC; serve hands bytes to a browser
        sys.stdout = InertOut(sys.stdout)  # type: ignore[assignment]
        sys.stderr = InertOut(sys.stderr)  # type: ignore[assignment]
    try:
        _check_args(args)
        rc = func(args)
    except UserError as exc:
        print(f"pilothouse: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pilothouse: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # an OSError: before the disk errors below
        # a closed pipe (`| head`) is not an error; silence the flush at exit too
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        from pilothouse.providers.errors import disk_error_line

        line = disk_error_line(exc)  # a full or read-only disk is the machine's state, not a bug
        if line is None:
            raise
        print(f"pilothouse: {line}", file=sys.stderr)
        return 1
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
