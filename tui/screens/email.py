"""The email section of the settings screen: problems by mail (core/notify/settings.py, docs/email.md).

The settings are the user's, not the repository's (`config_dir()/email.json`, 0600, written
atomically by core). Each field is edited alone and checked by core at once; while email is off,
what is given waits in a draft until the required fields are all there, then it is saved. The app
password goes to the key store and is never drawn: the row says only whether one is set.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pilothouse.providers.errors import UserError
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

if TYPE_CHECKING:
    from pilothouse.tui.widgets.table import Cell

PREFIX = "email:"
APPLIES = "watcher"  # the watcher reads them when it starts (`job start`, `notify email watch`)
# enabled_at is set once, when email is turned on (problems before it are not mailed); dkim_keys are
# key files given with `notify email setup --dkim-key DOMAIN=FILE`, not a one-line value
HIDDEN = ("enabled_at", "dkim_keys")


class PasswordModal(ModalScreen[str | None]):
    """The mailbox's app password, typed without echo; enter keeps it, esc leaves it as it was."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="password.cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "email · app password"
            yield Static("The mailbox's app password (kept in the key store, never shown):", classes="body")
            yield Input(password=True, id="password")
            yield Static("enter keeps it · esc cancels", classes="keys")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EmailSection:
    """The rows of the section and what enter on one does; the settings screen draws and routes them."""

    def __init__(self) -> None:
        self.draft: dict[str, Any] = {}  # fields given while email is off, not saved yet
        self.error: str | None = None  # email.json does not load

    def _saved(self) -> Any:
        from pilothouse.core.notify import settings as st

        try:
            conf = st.load()
        except UserError as exc:
            self.error = str(exc)
            return None
        self.error = None
        return conf

    def rows(self) -> list[tuple[str, dict[str, Cell]]]:
        from pilothouse.core.notify import settings as st

        conf = self._saved()
        values = conf.model_dump() if conf is not None else {}
        if self.error:
            state = Text(self.error, style="bold red")
        elif conf is not None:
            state = Text("on · enter turns it off", style="green")
        else:
            todo = ", ".join(st.missing(self.draft))
            state = Text(f"off · set {todo}, then the password", style="yellow")
        out: list[tuple[str, dict[str, Cell]]] = [
            (PREFIX, {"name": Text("email", style="bold"), "value": state, "applies": Text(APPLIES, style="dim")})]
        for name, field in st.EmailSettings.model_fields.items():
            if name in HIDDEN:
                continue
            if name in self.draft:
                value = Text(f"{self.draft[name]} (not saved: email is off)", style="yellow")
            elif name in values and values[name] not in (None, ""):
                value = Text(_shown(values[name]))
            else:
                default = field.get_default(call_default_factory=True) if not field.is_required() else None
                value = Text(_shown(default) if default not in (None, "") else "—", style="dim")
            out.append((PREFIX + name, {"name": Text(f"email.{name}", style="" if name in values else "dim"),
                                        "value": value, "applies": Text(APPLIES, style="dim")}))
        has = st.has_password() if not self.error else False
        out.append((PREFIX + "password", {"name": Text("email.password"),
                                          "value": Text("set", style="green") if has else Text("not set", style="dim"),
                                          "applies": Text(APPLIES, style="dim")}))
        return out

    def current(self, name: str) -> str:
        if name in self.draft:
            return str(self.draft[name])
        conf = self._saved()
        value = getattr(conf, name, None) if conf is not None else None
        return "" if value is None else str(value)

    def set_field(self, name: str, raw: str) -> str:
        """Check `name: raw` with the rest through core; saved when complete. Returns what happened."""
        from pilothouse.core.notify import settings as st
        from pilothouse.core.state.events import utc_now_iso

        conf = self._saved()
        if self.error:
            raise UserError(self.error)
        value = raw.strip()
        field = st.EmailSettings.model_fields.get(name)
        if not value and field is not None and field.is_required():
            raise UserError(f"email.{name}: it is required and cannot be cleared: type a new value (esc keeps it)")
        data = {**(conf.model_dump() if conf is not None else {}), **self.draft, name: value}
        if not value:  # an optional field cleared: its default applies
            del data[name]
            self.draft.pop(name, None)
        said = f"email.{name} kept" if value else f"email.{name} cleared (its default applies)"
        data.setdefault("enabled_at", utc_now_iso())  # problems opened before email was on are not mailed
        done = st.validate_draft(data, "email")
        if done is None:
            if value:
                self.draft[name] = value
            return f"{said}; still to set: {', '.join(st.missing(data))} (email is off until then)"
        path = st.save(done)
        self.draft.clear()
        return ("" if value else f"{said}; ") + f"email settings saved in {path}; they apply when the email watcher starts"

    def set_password(self, password: str, backend: str | None = None) -> str:
        from pilothouse.core.notify import settings as st

        used = st.set_password(password, backend)
        return f"app password stored ({used})"

    def turn_off(self) -> str:
        from pilothouse.core.notify import settings as st

        self.draft.clear()
        return "email is off: settings and password removed" if st.turn_off() else "email was not on"


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
