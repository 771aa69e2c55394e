"""One way to read a file the user keeps or gives (project.yaml, tasks.yaml, provider YAML, a
scenario, a request): bounded, regular files only, and every way it can be wrong one UserError.

- Only a regular file is opened: a FIFO would block the reader forever and a device (or a
  symlink to /dev/zero) would never end. The check is made on the open descriptor too, so a
  file swapped for a FIFO between the look and the open is refused, not waited on.
- At most `limit` bytes are read (+1 to know it is longer).
- Text that is not UTF-8 names the file and the byte offset of the first bad byte.
- YAML is parsed in two passes: the event stream (iterative, so depth costs nothing) is checked
  for nesting depth and for how many nodes the aliases expand to (a "billion laughs" file is
  refused before anything is built); then the document is built with duplicate keys refused and
  YAML 1.2 booleans (only true/false), so `review: off` stays the word "off".
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from pilothouse.providers.errors import UserError

MAX_BYTES = 4 << 20
MAX_DEPTH = 64
MAX_NODES = 200_000  # nodes of the document with every alias expanded

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: Path | str, what: str, limit: int = MAX_BYTES, *, too_long_fix: str = "shorten it") -> bytes:
    """The bytes of a regular file, at most `limit`. FileNotFoundError is the caller's to word."""
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is not None:
            raise UserError(f"{what}: is {kind}, not a regular file: give the path of a file")
        # O_NONBLOCK: a FIFO put in its place after the stat must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UserError(f"{what}: cannot read it ({exc.strerror or exc}): check the path and its permissions") from None
    with os.fdopen(fd, "rb") as fh:
        kind = _not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise UserError(f"{what}: is {kind}, not a regular file: give the path of a file")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise UserError(f"{what}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise UserError(f"{what}: larger than the limit of {limit} bytes: {too_long_fix}")
    return data


def decode(data: bytes, what: str, fix: str = "save it as UTF-8") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what}: not UTF-8 text (byte {exc.start}): {fix}") from None


def read_text(path: Path | str, what: str, limit: int = MAX_BYTES, *, not_text_fix: str = "save it as UTF-8",
              too_long_fix: str = "shorten it") -> str:
    return decode(read_bytes(path, what, limit, too_long_fix=too_long_fix), what, not_text_fix)


# ---------------------------------------------------------------- YAML


def _loader_class() -> Any:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        yaml_implicit_resolvers = {
            first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        dup = key in seen
                        seen.add(key)
                    except TypeError:
                        continue  # an unhashable key: the base class says so
                    if dup:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}: keep one of them", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    import re

    # YAML 1.2: only true/false are booleans; yes/no/on/off stay words
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    return Loader


_LOADER: Any = None


def _check_shape(text: str, where: str) -> None:
    """Refuse deep nesting and alias bombs from the event stream, before anything is built."""
    import yaml

    depth = 0
    sizes: list[int] = [0]  # node count of each open collection (the outermost: the document)
    anchors: dict[str, int] = {}
    anchor_stack: list[str | None] = []
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise UserError(f"{_at(where, event)}: nested deeper than {MAX_DEPTH} levels: flatten it")
            sizes.append(1)
            anchor_stack.append(event.anchor)
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            size = sizes.pop()
            anchor = anchor_stack.pop()
            if anchor:
                anchors[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            size = 1
            if event.anchor:
                anchors[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            size = anchors.get(event.anchor or "", 1)
        else:
            continue
        sizes[-1] += size
        if sizes[-1] > MAX_NODES:
            raise UserError(f"{_at(where, event)}: expands to more than {MAX_NODES} values (aliases "
                            "repeat what they point to): write it out plainly")


def _at(where: str, event_or_exc: Any) -> str:
    mark = getattr(event_or_exc, "start_mark", None) or getattr(event_or_exc, "problem_mark", None)
    return f"{where}:{mark.line + 1}" if mark is not None else where


def load_yaml(text: str, where: str) -> Any:
    """A YAML document from the user's text; every way it can be wrong a UserError naming
    `where` and the line."""
    import yaml

    global _LOADER
    if _LOADER is None:
        _LOADER = _loader_class()
    try:
        _check_shape(text, where)
        loader = _LOADER(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{_at(where, exc)}: invalid YAML ({problem}): fix it") from None
    except RecursionError:
        raise UserError(f"{where}: nested too deeply: flatten it") from None
    except ValueError as exc:  # e.g. an integer with thousands of digits
        raise UserError(f"{where}: a value cannot be read ({str(exc).split(':')[0]}): fix it") from None


def read_yaml(path: Path | str, what: str, limit: int = MAX_BYTES) -> Any:
    """`read_text` then `load_yaml`, for a YAML file the user keeps."""
    return load_yaml(read_text(path, what, limit), what)
