"""cli.main builds a real sub-parser only for the command it runs: that must not change any help
text, any parse, or the "invalid choice" answer."""

from __future__ import annotations

import argparse

import pytest
from pilothouse.core import cli


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_top_level_help_is_the_same_with_one_command_built() -> None:
    full = cli.build_parser()
    assert cli.build_parser("").format_help() == full.format_help()
    assert cli.build_parser("status").format_help() == full.format_help()


@pytest.mark.parametrize("command", sorted(_commands(cli.build_parser())))
def test_each_command_parses_and_helps_as_before(command: str) -> None:
    full = _commands(cli.build_parser())[command]
    one = cli.build_parser(command)
    built = _commands(one)
    assert built[command].format_help() == full.format_help()
    others = [name for name, p in built.items() if p is not None and p is not built[command]]
    assert all(built[n] is built[command] for n in others)  # aliases share the one real parser


def test_unknown_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for name in _commands(cli.build_parser()):
        assert repr(name) in err
