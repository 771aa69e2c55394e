"""Changing one setting of `.ai/project.yaml` the way the operator would by hand: the file's comments,
order and quoting kept (ruamel.yaml's round trip; PyYAML would drop every comment), the result
checked exactly as `load_project` checks it before anything is written, and written atomically.

Budgets are read fresh on each check, so a new cap applies at once, to work already going too. The
supervisor re-reads the file when it changes, so every other setting applies to what starts after
the change (a launch, a gate, a merge); work already going keeps what it started with.
"""

from __future__ import annotations

import io
import re
from typing import Any

from pilothouse.core.records.layout import RepoLayout
from pilothouse.providers.errors import UserError

FILE = ".ai/project.yaml"
AT_ONCE = ("budgets.",)  # read fresh by the supervisor on every check (core/stops/budgets.py)


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()  # round trip: comments, order and quoting survive a load and a dump
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long gate command onto two lines
    return yaml


def rows(layout: RepoLayout) -> list[tuple[str, Any, bool]]:
    """Every choice the project has — what the file sets and the defaults it leaves — as (dotted
    path, value, set in the file), from the settings as core loads them."""
    from pilothouse.core.records.layout import read_text
    from pilothouse.core.records.project import load_project, parse_yaml

    effective = _flat(load_project(layout).model_dump(mode="json"))
    written = {path for path, _ in _flat(parse_yaml(read_text(layout.project_yaml, str(layout.project_yaml)), FILE))}
    return [(path, value, path in written or any(w.startswith(path + ".") for w in written))
            for path, value in effective]


def _flat(data: Any) -> list[tuple[str, Any]]:
    """Mappings opened into dotted paths; lists and scalars as they are."""
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), sub)
        else:
            out.append((prefix, value))

    walk("", data if isinstance(data, dict) else {})
    return out


def when(path: str) -> str:
    return "at once" if path.startswith(AT_ONCE) else "to what starts next (work already going keeps its own)"


_COMMENT = re.compile(r"^(?P<code>.*?\S)(?P<gap>\s+)(?P<comment>#.*)$")


def _splice(original: str, before: str, after: str) -> str:
    """`after` (ruamel's dump with the one change) with every line the change did not touch taken as
    the operator wrote it: the round trip alone rewrites `null` and `~` as nothing and moves a changed
    line's inline comment to its old column. `before` is the dump without the change; ruamel keeps
    the lines, so its lines are the original's one for one (else `after` is taken as it is)."""
    import difflib

    orig, old, new = original.splitlines(keepends=True), before.splitlines(keepends=True), after.splitlines(keepends=True)
    if len(orig) != len(old):
        return after
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op == "equal":
            out += orig[i1:i2]
            continue
        for n, line in enumerate(new[j1:j2]):
            was = _COMMENT.match(orig[i1 + n].rstrip("\n")) if op == "replace" and i1 + n < i2 else None
            now = _COMMENT.match(line.rstrip("\n"))
            if was and now and was["comment"] == now["comment"]:
                line = f"{now['code']}{was['gap']}{now['comment']}\n"  # the operator's gap before the comment
            out.append(line)
    return "".join(out)


def set_value(layout: RepoLayout, path: str, raw: str) -> str:
    """Set `path` (dotted) to `raw` read as YAML (`5000`, `off`, `[a, b]`, a string), check the whole
    file as load_project does, write it atomically. Returns when it applies; raises UserError (one
    line naming the field and the fix) and leaves the file as it was when the value does not fit."""
    from pilothouse.core.records.layout import read_text
    from pilothouse.core.records.project import ProjectConfig, format_validation_error, parse_yaml
    from pilothouse.providers.fsutil import atomic_write_text
    from pydantic import ValidationError

    text = read_text(layout.project_yaml, str(layout.project_yaml))
    yaml = _yaml()
    doc = yaml.load(text)
    keys = [k for k in path.split(".") if k]
    if not keys or doc is None:
        raise UserError(f"{FILE}: no setting named {path!r}")
    value = parse_yaml(raw, f"the new value of {path}") if raw.strip() else None
    node = doc
    for key in keys[:-1]:
        if key not in node or not hasattr(node[key], "keys"):
            node[key] = {}
        node = node[key]
    before = io.StringIO()
    yaml.dump(doc, before)
    node[keys[-1]] = value
    buf = io.StringIO()
    yaml.dump(doc, buf)
    new = _splice(text, before.getvalue(), buf.getvalue())
    data = parse_yaml(new, FILE)
    try:
        ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, FILE, new, ProjectConfig)) from None
    atomic_write_text(layout.project_yaml, new)
    return when(path)
