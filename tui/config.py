"""The operator's cockpit file, `config_dir()/cockpit.yaml`: the theme and the keys.

    theme: nord                # any theme of the command palette's theme picker
    keys:
      problem.retry: R         # a binding id (`pilothouse view --keys`) and its key(s)
      app.help: f1, question_mark

Read through providers/userfile like every file the user keeps. Nothing in it stops the cockpit: an
entry that is wrong is one line naming the file, the line and the fix, and its default stays. The
cockpit writes the theme back when the operator picks one, keeping the file's comments (ruamel's
round trip), atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilothouse.providers import paths
from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.tui.keymap import Scopes

MAX_BYTES = 64 * 1024
SETTINGS = ("theme", "keys")


def config_file() -> Path:
    return paths.config_dir() / "cockpit.yaml"


@dataclass
class CockpitConfig:
    theme: str | None = None
    keymap: dict[str, str] = field(default_factory=dict)  # binding id -> keys, for App.set_keymap
    problems: list[str] = field(default_factory=list)  # one line each: file, line, fix


def load(themes: Iterable[str], scopes: Callable[[], Scopes]) -> CockpitConfig:
    """The cockpit file as far as it is right; what is wrong is in `problems`. `scopes` is asked for
    only when the file has keys (it imports every screen)."""
    from pilothouse.providers.userfile import load_yaml, read_text

    path = config_file()
    where = str(path)
    try:
        text = read_text(path, where, MAX_BYTES)
        data = load_yaml(text, where)
    except FileNotFoundError:
        return CockpitConfig()
    except UserError as exc:
        return CockpitConfig(problems=[f"{exc} (the cockpit uses its defaults)"])
    if data is None:
        return CockpitConfig()
    if not isinstance(data, dict):
        return CockpitConfig(problems=[f"{where}: not a mapping: write `theme:` and `keys:` (docs/cockpit.md)"])
    lines = _lines(text)
    conf = CockpitConfig()
    for name in data:
        if name not in SETTINGS:
            conf.problems.append(f"{where}:{lines.get((str(name),), 1)}: '{name}' is not a cockpit setting: "
                                 f"the file takes {' and '.join(SETTINGS)}")
    theme = data.get("theme")
    known = sorted(themes)
    if theme is not None:
        if isinstance(theme, str) and theme in known:
            conf.theme = theme
        else:
            conf.problems.append(f"{where}:{lines.get(('theme',), 1)}: theme: '{theme}' is not a theme: "
                                 f"one of {', '.join(known)}")
    conf.keymap, more = _keys(data.get("keys"), lines, where, scopes)
    conf.problems = sorted(conf.problems + more, key=lambda line: _line_of(line, where))
    return conf


def _line_of(problem: str, where: str) -> int:
    number = problem.removeprefix(f"{where}:").split(":", 1)[0]
    return int(number) if number.isdigit() else 0


def _keys(raw: Any, lines: dict[tuple[str, ...], int], where: str,
          scopes: Callable[[], Scopes]) -> tuple[dict[str, str], list[str]]:
    from pilothouse.tui import keymap

    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [f"{where}:{lines.get(('keys',), 1)}: keys: not a mapping: write one `binding.id: key` a line"]
    entries, problems = [], []
    for binding_id, value in raw.items():
        line = lines.get(("keys", str(binding_id)), lines.get(("keys",), 1))
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            problems.append(f"{where}:{line}: {binding_id}: '{value}' is not a key: write it as text, e.g. R, "
                            "ctrl+r or f5 (several: R, f5)")
            continue
        entries.append(keymap.Entry(str(binding_id), keymap.normalise(value) if value.strip() else [], line))
    accepted, more = keymap.check(entries, where, scopes())
    return accepted, problems + more


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of each top-level key and of each key under `keys` (the file already parsed once)."""
    import yaml

    out: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out
    if not isinstance(root, yaml.MappingNode):
        return out
    for key, value in root.value:
        out[(str(key.value),)] = key.start_mark.line + 1
        if key.value == "keys" and isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                out[("keys", str(sub.value))] = sub.start_mark.line + 1
    return out


HEADER = "# pilothouse cockpit: the theme and the keys (docs/cockpit.md)\n"


def save_theme(theme: str) -> Path:
    """Write `theme:` into the cockpit file, the rest of it (comments too) as it was."""
    import io

    from pilothouse.providers.fsutil import atomic_write_text
    from pilothouse.providers.userfile import read_text
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = config_file()
    where = str(path)
    yaml = YAML()  # round trip: the operator's comments and order survive
    try:
        text = read_text(path, where, MAX_BYTES)
    except FileNotFoundError:
        text = HEADER
    try:
        data = yaml.load(text)
    except YAMLError:
        raise UserError(f"{where}: invalid YAML: fix it, then pick the theme again") from None
    out = io.StringIO()
    if data is None:  # only comments (or nothing): they stay above the new line
        out.write(text if text.endswith("\n") or not text else text + "\n")
        yaml.dump({"theme": theme}, out)
    elif isinstance(data, dict):
        data["theme"] = theme
        yaml.dump(data, out)
    else:
        raise UserError(f"{where}: not a mapping: write `theme:` and `keys:` (docs/cockpit.md)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, out.getvalue())
    return path


def keys_report(scopes: Callable[[], Scopes]) -> dict[str, Any]:
    """`pilothouse view --keys`: every binding id with its keys now, and what the file got wrong."""
    from pilothouse.tui import keymap
    from textual.theme import BUILTIN_THEMES

    conf = load(BUILTIN_THEMES, scopes)
    rows = [{"id": r["id"], "keys": [keymap.display(k) for k in r["keys"]],
             "default": [keymap.display(k) for k in r["default"]], "scopes": r["scopes"], "action": r["action"]}
            for r in keymap.listing(conf.keymap, scopes())]
    return {"file": str(config_file()), "theme": conf.theme, "keys": rows, "problems": conf.problems}
