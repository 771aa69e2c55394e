"""One way to read a user's file (providers/userfile.py): regular files only, bounded, UTF-8 with
the byte offset, YAML with depth and aliases bounded, duplicate keys refused, YAML 1.2 booleans."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pilothouse.providers.errors import UserError
from pilothouse.providers.userfile import MAX_DEPTH, load_yaml, read_text


def test_a_fifo_or_a_device_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "project.yaml"
    os.mkfifo(fifo)  # no writer: opening it for reading would block forever
    with pytest.raises(UserError, match=r"project.yaml: is a FIFO, not a regular file"):
        read_text(fifo, "project.yaml")
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(UserError, match="is a character device"):
        read_text(link, "zero.yaml")
    with pytest.raises(UserError, match="is a directory"):
        read_text(tmp_path, "dir")
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "missing", "missing")


def test_not_utf8_names_the_byte_and_too_large_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_bytes(b"gates:\n  fast: caf\xe9\n")
    with pytest.raises(UserError, match=r"p.yaml: not UTF-8 text \(byte 18\)"):
        read_text(f, "p.yaml")
    f.write_bytes(b"x" * 101)
    with pytest.raises(UserError, match="larger than the limit of 100 bytes"):
        read_text(f, "p.yaml", 100)


def test_yaml_words_stay_words_and_duplicate_keys_are_refused() -> None:
    assert load_yaml("review: off\nconfinement: on\nx: yes\nok: true\n", "f") == \
        {"review": "off", "confinement": "on", "x": "yes", "ok": True}
    with pytest.raises(UserError, match=r"f:3: invalid YAML \(duplicate key 'a'"):
        load_yaml("a: 1\nb: 2\na: 3\n", "f")
    assert load_yaml("base: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n", "f")["c"] == {"x": 2}  # a merge overrides


def test_deep_nesting_and_alias_bombs_are_refused_before_anything_is_built() -> None:
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "f")
    with pytest.raises(UserError, match="f:1"):
        load_yaml("[" * 100_000, "f")
    bomb = "a: &a [1,2,3,4,5,6,7,8,9,10]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True))
    with pytest.raises(UserError, match="expands to more than"):
        load_yaml(bomb, "f")
    with pytest.raises(UserError, match="a value cannot be read"):
        load_yaml("x: " + "1" * 5000, "f")
