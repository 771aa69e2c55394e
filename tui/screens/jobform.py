"""New job (`n`) and correction (`e`): the request in the operator's words, acceptance, attachments."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pilothouse.providers.errors import UserError
from pilothouse.tui.keymap import shown
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Label, Static, TextArea

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def current_request(record: Any) -> str:
    """The latest request text of a job record (dict or model), whatever its revision layout."""
    data = record.model_dump() if hasattr(record, "model_dump") else record
    if not isinstance(data, dict):
        return ""
    for key in ("revisions", "requests"):
        revs = data.get(key)
        if isinstance(revs, list) and revs:
            last = revs[-1]
            if isinstance(last, dict):
                return str(last.get("request") or last.get("text") or "")
            return str(last)
    return str(data.get("request") or "")


class JobForm(ModalScreen[str | None]):
    """The form stays open until core has accepted it: `save` (called in a worker thread) does the
    core call and returns the message to show; a UserError it raises is shown in the form, with
    everything typed kept. Dismissed with that message, or None when cancelled."""

    BINDINGS = [
        Binding("ctrl+s", "submit", "Save", id="form.save"),
        Binding("escape", "cancel", "Cancel", id="form.cancel"),
    ]

    def __init__(self, name: str | None = None, request: str = "",
                 save: Callable[[dict[str, Any]], str] | None = None) -> None:
        super().__init__()
        self.job_name, self.request = name, request
        self.save = save
        self.saving = False

    @property
    def editing(self) -> bool:
        return self.job_name is not None

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog jobform") as box:
            box.border_title = f"correct job {self.job_name}" if self.editing else "new job"
            keys = f"{shown(self.app, 'form.save', 'ctrl+s')[0]} save · {shown(self.app, 'form.cancel', 'escape')[0]} cancel"
            # a correction has one field: no other to tab to
            box.border_subtitle = Text(keys if self.editing else f"tab next field · {keys}")
            if not self.editing:
                yield Label("name (lowercase, digits, - _ .)")
                yield Input(placeholder="e.g. add-slugify", id="name")
            yield Label("request — in your own words: behaviour, constraints, examples, out of scope")
            yield TextArea(self.request, id="request", soft_wrap=True, show_line_numbers=False)
            if not self.editing:
                yield Label("acceptance criteria (optional)")
                yield TextArea("", id="acceptance", soft_wrap=True)
                yield Label("attachments: screenshot paths, space-separated (optional)")
                yield Input(placeholder="shots/login.png shots/error.png", id="attachments")
            yield Static("", id="form-error", classes="error")
        yield Footer()  # at 80x24 the form scrolls: ctrl+s must not depend on scrolling to the end

    def on_mount(self) -> None:
        for area in self.query(TextArea):
            area.cursor_blink = not self.app.is_headless
        for box in self.query(Input):
            box.cursor_blink = not self.app.is_headless
        self.query_one("#form-error", Static).display = False
        self.query_one("#request" if self.editing else "#name").focus()

    @property
    def error(self) -> str:
        """The one-line error shown in the form ("" when none)."""
        return getattr(self, "_error", "")

    def show_error(self, message: str) -> None:
        self.saving = False
        self._error = " ".join(message.split())
        box = self.query_one("#form-error", Static)
        box.update(Text(self._error, style="bold red"))
        box.display = bool(self._error)
        if self._error:
            box.scroll_visible(animate=False)

    def _form(self) -> dict[str, Any] | None:
        """The typed form, or None after showing what is wrong with it."""
        request = self.query_one("#request", TextArea).text.strip()
        if not request:
            self.show_error("write the request first")
            return None
        if self.editing:
            if request == self.request.strip():
                self.show_error("the request is unchanged")
                return None
            return {"request": request}
        name = self.query_one("#name", Input).value.strip()
        if not NAME_RE.match(name):
            self.show_error("name: lowercase letters, digits, '-', '_' or '.', starting with a letter or digit")
            return None
        raw = self.query_one("#attachments", Input).value
        try:
            attachments = [Path(p).expanduser() for p in shlex.split(raw)]
        except ValueError as exc:
            self.show_error(f"attachments: {exc}")
            return None
        return {"name": name, "request": request,
                "acceptance": self.query_one("#acceptance", TextArea).text.strip(), "attachments": attachments}

    def action_submit(self) -> None:
        if self.saving:
            return
        form = self._form()
        if form is None:
            return
        self.show_error("")
        save = self.save
        if save is None:
            self.dismiss(None)
            return
        self.saving = True

        def work() -> None:
            try:
                message = save(form)
            except UserError as exc:
                self.app.call_from_thread(self.show_error, str(exc))
            except Exception as exc:  # noqa: BLE001 - keep the form (and the typed text) up; say what failed
                self.app.call_from_thread(self.show_error, f"{type(exc).__name__}: {exc}")
            else:
                self.app.call_from_thread(self.dismiss, message)

        self.run_worker(work, thread=True, group="save", exit_on_error=False)

    @property
    def dirty(self) -> bool:
        """Something typed that cancelling would lose."""
        if self.query_one("#request", TextArea).text.strip() != self.request.strip():
            return True
        if self.editing:
            return False
        return bool(self.query_one("#name", Input).value.strip()
                    or self.query_one("#acceptance", TextArea).text.strip()
                    or self.query_one("#attachments", Input).value.strip())

    def action_cancel(self) -> None:
        if not self.dirty:
            self.dismiss(None)
            return
        from pilothouse.tui.screens.modals import ConfirmModal

        def confirmed(ok: bool | None) -> None:
            if ok:
                self.dismiss(None)

        what = f"your correction of {self.job_name}" if self.editing else "this new job"
        self.app.push_screen(ConfirmModal("discard", f"Discard {what}? What you typed is lost.", "Discard"),
                             confirmed)
