"""Small dialogs: confirm (skip, abort, stop, discard) and words (hint, plan). Keyboard only."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class ConfirmModal(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        # destructive: enter is the safe default, only `y` confirms
        Binding("n,escape,enter", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, title: str, body: str, verb: str = "Yes") -> None:
        super().__init__()
        self.title_text, self.body, self.verb = title, body, verb

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = self.title_text
            yield Static(self.body, classes="body")
            yield Label(f"[b]y[/b] {self.verb}   [b]n[/b]/enter/esc cancel", classes="keys")

    def action_answer(self, ok: bool) -> None:
        self.dismiss(ok)


class WordsModal(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="words.cancel")]

    def __init__(self, title: str, prompt: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.prompt, self.value = title, prompt, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = self.title_text
            yield Static(self.prompt, classes="body")
            yield Input(value=self.value, placeholder="your words", id="words")
            yield Label("[b]enter[/b] send   [b]esc[/b] cancel", classes="keys")

    def on_mount(self) -> None:
        box = self.query_one(Input)
        box.cursor_blink = self.app.is_headless is False and box.cursor_blink
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        words = event.value.strip()
        if words:
            self.dismiss(words)
        else:
            self.notify("type the words first (esc cancels)", severity="warning")

    def action_cancel(self) -> None:
        self.dismiss(None)
