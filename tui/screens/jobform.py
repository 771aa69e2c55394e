"""New job (`n`) and correction (`e`): the request in the operator's words, acceptance, attachments."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, TextArea

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


class JobForm(ModalScreen[dict[str, Any] | None]):
    BINDINGS = [
        Binding("ctrl+s", "submit", "Save", id="form.save"),
        Binding("escape", "cancel", "Cancel", id="form.cancel"),
    ]

    def __init__(self, name: str | None = None, request: str = "") -> None:
        super().__init__()
        self.job_name, self.request = name, request

    @property
    def editing(self) -> bool:
        return self.job_name is not None

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog jobform") as box:
            box.border_title = f"correct job {self.job_name}" if self.editing else "new job"
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
            yield Label("[b]tab[/b] next field   [b]ctrl+s[/b] save   [b]esc[/b] cancel", classes="keys")

    def on_mount(self) -> None:
        for area in self.query(TextArea):
            area.cursor_blink = not self.app.is_headless
        for box in self.query(Input):
            box.cursor_blink = not self.app.is_headless
        self.query_one("#request" if self.editing else "#name").focus()

    def action_submit(self) -> None:
        request = self.query_one("#request", TextArea).text.strip()
        if not request:
            self.notify("write the request first", severity="warning")
            return
        if self.editing:
            if request == self.request.strip():
                self.notify("the request is unchanged", severity="warning")
                return
            self.dismiss({"request": request})
            return
        name = self.query_one("#name", Input).value.strip()
        if not NAME_RE.match(name):
            self.notify("name: lowercase letters, digits, '-', '_' or '.', starting with a letter or digit",
                        severity="warning")
            return
        raw = self.query_one("#attachments", Input).value
        try:
            attachments = [Path(p).expanduser() for p in shlex.split(raw)]
        except ValueError as exc:
            self.notify(f"attachments: {exc}", severity="warning")
            return
        self.dismiss({"name": name, "request": request,
                      "acceptance": self.query_one("#acceptance", TextArea).text.strip(),
                      "attachments": attachments})

    def action_cancel(self) -> None:
        self.dismiss(None)
