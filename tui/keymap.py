"""The operator's keys: every binding of the cockpit by id and scope, and a keymap checked against them.

A scope is what is active at once (tui/app.py's binding_scopes): the focused widget's keys, its
screen's and, on the dashboard, the app's. Textual's own bindings (ctrl+q, a table's
enter and arrows) belong to the scope too: they take no remapping, but a key they hold is taken.
Textual applies the keymap (`App.set_keymap`); this module decides which entries it gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.binding import Binding, BindingsMap
from textual.keys import REPLACED_KEYS, Keys, _character_to_key, format_key, key_to_character

MODIFIERS = frozenset({"ctrl", "alt", "shift", "meta", "super", "hyper"})
# keys Textual names (escape, f5, pageup, …) but not its internal ones (<any>, ctrl-at)
_NAMED = frozenset(k.value for k in Keys if "+" not in k.value and not k.value.startswith("<") and "-" not in k.value)


Scopes = list[tuple[str, tuple[type, ...]]]  # (name, the classes whose bindings are active together)


def _bindings(cls: type) -> list[Binding]:
    """Every binding a class holds (one Binding per key): its bases', where a key a subclass binds
    again is the subclass's, as Textual merges them."""
    merged: dict[str, list[Binding]] = {}
    for klass in reversed(cls.__mro__):
        declared = klass.__dict__.get("BINDINGS")
        if declared:
            merged.update(BindingsMap(declared).key_to_bindings)
    return [b for bindings in merged.values() for b in bindings]


@dataclass(frozen=True)
class Bound:
    """One key of one binding in one scope."""

    scope: str
    key: str
    binding: Binding
    chain: int  # which of the scopes (two may share a name: the dashboard's panels)


def bound(scopes: Scopes) -> list[Bound]:
    """Every key of every scope as the code binds it (no keymap)."""
    out: list[Bound] = []
    for chain, (scope, classes) in enumerate(scopes):
        seen: set[tuple[str, str, str | None]] = set()
        for cls in classes:
            for b in _bindings(cls):
                mark = (b.key, b.action, b.id)
                if mark not in seen:
                    seen.add(mark)
                    out.append(Bound(scope, b.key, b, chain))
    return out


def key_problem(key: str) -> str | None:
    """Why `key` (one key of a keymap entry, normalised) is not a key Textual can bind, or None."""
    *mods, name = key.split("+")
    if not name:
        return f"'{key}' ends with '+': name a key after the modifiers"
    wrong = [m for m in mods if m not in MODIFIERS]
    if wrong:
        return f"'{wrong[0]}' is not a modifier: use ctrl, alt, shift, meta or super"
    if len(name) == 1 and name.isprintable() and not name.isspace():
        return None
    if name in _NAMED:
        return None
    char = key_to_character(REPLACED_KEYS.get(name, name))  # slash, question_mark, dollar_sign…
    if char is None:
        return (f"'{name}' is not a key: write one character (R, ?, $), or a name such as f5, "
                "escape, enter, tab, space, pageup, ctrl+r")
    return None if len(char) == 1 and char.isprintable() else f"'{name}' is not a key you can type"


def normalise(keys: str) -> list[str]:
    """A keymap value (`R`, `?`, `ctrl+r, f5`) as Textual's key names."""
    out = []
    for raw in keys.split(","):
        key = raw.strip()
        out.append(_character_to_key(key) if len(key) == 1 else key)
    return out


def display(key: str) -> str:
    """A key as the footer writes it (`?`, `^r`, `$`): App.get_key_display's rule, which needs no app
    here (the CLI's listing has none)."""
    modifiers, name = Binding(key, "").parse_key()
    shown = format_key(name)
    if "ctrl" in modifiers:
        modifiers.remove("ctrl")
        shown = f"^{shown}"
    return "+".join([*modifiers, shown])


@dataclass
class Entry:
    binding_id: str
    keys: list[str]
    line: int


def check(entries: list[Entry], where: str, scopes: Scopes) -> tuple[dict[str, str], list[str]]:
    """The entries Textual may apply (id -> comma-separated keys) and one line per entry refused:
    an unknown id, a key that is no key, or a key another action holds in the same scope."""
    everything = bound(scopes)
    ids = {b.binding.id for b in everything if b.binding.id}
    problems: list[str] = []
    accepted: dict[str, Entry] = {}
    for entry in entries:
        at = f"{where}:{entry.line}"
        if entry.binding_id not in ids:
            problems.append(f"{at}: '{entry.binding_id}' is not a binding id: `pilothouse view --keys` lists them")
            continue
        bad = next((p for p in map(key_problem, entry.keys) if p), None) if entry.keys else "no key given"
        if bad:
            problems.append(f"{at}: {entry.binding_id}: {bad}; its default key stays")
            continue
        if entry.binding_id in accepted:
            problems.append(f"{at}: {entry.binding_id} is set twice (line {accepted[entry.binding_id].line} too): "
                            "keep one")
            continue
        accepted[entry.binding_id] = entry
    while True:  # drop the last entry that makes a clash until none is left (a swap of two keys is fine)
        clash = _first_clash(everything, accepted)
        if clash is None:
            break
        entry, scope, key, other = clash
        del accepted[entry.binding_id]
        holder = f"{other.description or other.action} ({other.id})" if other.id else \
            f"{other.description or other.action} (Textual's own)"
        problems.append(f"{where}:{entry.line}: {entry.binding_id}: '{display(key)}' is already {holder} "
                        f"in the {scope}: choose another key; its default key stays")
    return {i: ",".join(e.keys) for i, e in accepted.items()}, problems


def _first_clash(everything: list[Bound], accepted: dict[str, Entry]) -> tuple[Entry, str, str, Binding] | None:
    """The clash of the latest entry, if any: (entry, scope, key, the binding it clashes with)."""
    holders: dict[tuple[int, str, str], dict[str, tuple[Binding, Entry | None]]] = {}
    for b in everything:
        entry = accepted.get(b.binding.id or "")
        ident = b.binding.id or f"<{b.binding.action}>"  # one action bound twice (a table's and its base's)
        for key in (entry.keys if entry else [b.key]):
            holders.setdefault((b.chain, b.scope, key), {}).setdefault(ident, (b.binding, entry))
    clashes = []
    for (_, scope, key), held in holders.items():
        mapped = [(e, h) for h, e in held.values() if e is not None]
        if len(held) > 1 and mapped:
            entry, binding = max(mapped, key=lambda pair: pair[0].line)
            other = next(h for h, _ in held.values() if h is not binding)
            clashes.append((entry, scope, key, other))
    return max(clashes, key=lambda c: c[0].line) if clashes else None


def listing(keymap: dict[str, str], scopes: Scopes) -> list[dict[str, Any]]:
    """Every binding id with its scopes, its keys now (the keymap's, else the default) and what it does."""
    rows: dict[str, dict[str, Any]] = {}
    for b in bound(scopes):
        bid = b.binding.id
        if not bid:
            continue
        row = rows.setdefault(bid, {"id": bid, "keys": [], "default": [], "action": b.binding.description
                                    or b.binding.action, "scopes": []})
        if b.key not in row["default"]:
            row["default"].append(b.key)
        if b.scope not in row["scopes"]:
            row["scopes"].append(b.scope)
    for row in rows.values():
        row["keys"] = keymap[row["id"]].split(",") if row["id"] in keymap else list(row["default"])
        row["shown"] = " ".join(display(k) for k in row["keys"])
    return sorted(rows.values(), key=lambda r: r["id"])


def keys_of(binding: Binding, keymap: dict[str, str]) -> str:
    """What the operator presses for `binding` now, as the footer writes it."""
    keys = keymap.get(binding.id or "")
    return " ".join(display(k) for k in (keys.split(",") if keys else binding.key.split(",")))


def shown(app: Any, binding_id: str, default: str) -> list[str]:
    """The keys the operator presses for a binding now (their cockpit.yaml's, else `default`), as the
    footer writes them: for the hints a dialog or a status line writes in its own text."""
    return keys_of(Binding(default, "", id=binding_id), getattr(app, "keymap", {})).split()
