"""Settings (`C`): every choice of `.ai/project.yaml` — the file's own and the defaults it leaves —
and when a change applies. Enter on one edits it; core checks the whole file before writing it,
keeps its comments (core/records/settings.py), and a value that does not fit is refused in one
line naming the field, the file untouched. Below them, the user's email settings (screens/email.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pilothouse.providers.errors import UserError
from pilothouse.tui.screens.email import PREFIX, EmailSection, PasswordModal
from pilothouse.tui.widgets.table import Cell, Col, KeyedTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

if TYPE_CHECKING:
    from pilothouse.tui.app import CockpitApp


class SettingsTable(KeyedTable):
    COLUMNS = (Col("name", "setting", 24, fit=True), Col("value", "value", 20, flex=1),
               Col("applies", "applies", 10, wide_only=True))


def shown(value: Any) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value)


class SettingsScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="settings.back")]

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static(id="settings-head")
        yield SettingsTable(id="settings-table", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        self.email = EmailSection()
        self.query_one("#settings-table").border_title = ".ai/project.yaml and email · enter edits"
        self.reload()
        self.query_one("#settings-table").focus()

    def reload(self) -> None:
        from pilothouse.core.records import settings

        layout = self.cockpit.layout
        head = self.query_one("#settings-head", Static)
        try:
            rows = settings.rows(layout) if layout is not None else []
        except UserError as exc:
            head.update(Text(str(exc), style="bold red"))
            self.query_one(SettingsTable).set_rows(self.email.rows())
            return
        self.values = {path: value for path, value, _ in rows}
        table_rows: list[tuple[str, dict[str, Cell]]] = []
        for path, value, written in rows:
            table_rows.append((path, {"name": Text(path, style="" if written else "dim"),
                                      "value": Text(shown(value), style="" if written else "dim"),
                                      "applies": Text("at once", style="green") if path.startswith(settings.AT_ONCE)
                                      else Text("next start", style="dim")}))
        self.query_one(SettingsTable).set_rows(table_rows + self.email.rows())
        head.update(Text("settings", style="bold") + Text("   dim: a default the file leaves · budgets apply at "
                                                          "once; the rest to what starts next; email when its "
                                                          "watcher starts", style="dim"))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        from pilothouse.tui.screens.modals import ValueModal

        path = event.row_key.value
        if not path:
            return
        if path.startswith(PREFIX):
            self.edit_email(path.removeprefix(PREFIX))
            return
        layout = self.cockpit.layout
        if layout is None:
            return
        current = self.values.get(path)

        def save(raw: str) -> str:
            """In the dialog: core checks and writes, or refuses in one line and the dialog stays."""
            from pilothouse.core.records import settings

            return settings.set_value(layout, path, raw)

        def saved(applies: str | None) -> None:
            if applies is None:
                return
            self.notify(f"{path} saved; it applies {applies}", title="settings", timeout=5)
            self.reload()
            self.query_one(SettingsTable).select_key(path)

        self.app.push_screen(ValueModal(f"set · {path}", "The new value, as you would write it in the file "
                                        "(5000, off, [a, b], a command; empty: the default):",
                                        value="" if current is None else shown(current), save=save), saved)

    # --- email (the user's, not the repository's) ------------------------------------------------

    def edit_email(self, name: str) -> None:
        from pilothouse.tui.screens.modals import ConfirmModal, ValueModal

        def done(what: str | None, key: str) -> None:
            if what:
                self.notify(what, title="email", timeout=8)
            self.reload()
            self.query_one(SettingsTable).select_key(key)

        def refused(exc: UserError, key: str) -> None:
            self.notify(str(exc), title="email", severity="error", timeout=10)
            self.query_one(SettingsTable).select_key(key)

        if name == "":
            def off(yes: bool | None) -> None:
                if yes:
                    done(self.email.turn_off(), PREFIX)

            if self.email.current("address") and not self.email.draft:
                self.app.push_screen(ConfirmModal("email · turn off", "Forget the email settings and the app "
                                                  "password? Problems are no longer mailed.", "Turn off"), off)
            else:
                self.notify("set the email fields below (enter on each), then the password", title="email")
            return
        if name == "password":
            self.app.push_screen(PasswordModal(), lambda pw: self._store_password(pw, done, refused))
            return

        def got(what: str | None) -> None:
            if what is not None:
                done(what, PREFIX + name)

        # empty clears an optional field (core refuses it for a required one); a refusal stays in the dialog
        self.app.push_screen(ValueModal(f"set · email.{name}", "The new value (empty: the default):",
                                        value=self.email.current(name),
                                        save=lambda raw: self.email.set_field(name, raw)), got)

    def _store_password(self, password: str | None, done: Any, refused: Any) -> None:
        from pilothouse.providers.keys import NoKeyringBackend
        from pilothouse.tui.screens.modals import ConfirmModal

        if password is None:
            return
        key = PREFIX + "password"
        try:
            done(self.email.set_password(password), key)
        except NoKeyringBackend:
            def to_file(yes: bool | None) -> None:
                if yes:
                    try:
                        done(self.email.set_password(password, "file"), key)
                    except UserError as exc:
                        refused(exc, key)

            self.app.push_screen(ConfirmModal("email · no keyring", "This machine has no OS keyring. Keep the app "
                                              "password in a private file (0600, in pilothouse's secrets "
                                              "directory)?", "Keep it in a file"), to_file)
        except UserError as exc:
            refused(exc, key)
