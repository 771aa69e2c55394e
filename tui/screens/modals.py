"""Small dialogs: confirm (skip, abort, stop, discard) and words (hint, plan). Keyboard only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pilothouse.tui.keymap import shown
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static, TextArea


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
            no = shown(self.app, "confirm.no", "n,escape,enter")
            # Text, not markup: a key the operator chose may be "["
            yield Label(Text.assemble((shown(self.app, "confirm.yes", "y")[0], "bold"), f" {self.verb}   ",
                                      (no[0], "bold"), "".join(f"/{k}" for k in no[1:]), " cancel"), classes="keys")

    def action_answer(self, ok: bool) -> None:
        self.dismiss(ok)


class WordsModal(ModalScreen[str | None]):
    """Words for a worker (hint, plan): what it is answering first (the problem's reason, findings,
    gate output), then room for more than one line; ctrl+s sends, as in the job form."""

    BINDINGS = [
        Binding("ctrl+s", "send", "Send", id="words.send"),
        Binding("escape", "cancel", "Cancel", id="words.cancel"),
    ]

    def __init__(self, title: str, prompt: str, value: str = "", context: Text | None = None,
                 allow_empty: bool = False) -> None:
        super().__init__()
        self.title_text, self.prompt, self.value = title, prompt, value
        self.context = context
        self.allow_empty = allow_empty  # nothing typed is an answer (clearing a field), not a slip

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog words") as box:
            box.border_title = self.title_text
            box.border_subtitle = Text(f"{shown(self.app, 'words.send', 'ctrl+s')[0]} send · "
                                       f"{shown(self.app, 'words.cancel', 'escape')[0]} cancel")
            if self.context is not None:
                with VerticalScroll(id="words-context"):
                    yield Static(self.context, classes="evidence")
            yield Static(self.prompt, classes="body")
            yield TextArea(self.value, id="words", soft_wrap=True, show_line_numbers=False)
        yield Footer()

    def on_mount(self) -> None:
        box = self.query_one(TextArea)
        box.cursor_blink = not self.app.is_headless
        box.focus()

    def action_send(self) -> None:
        words = self.query_one(TextArea).text.strip()
        if words or self.allow_empty:
            self.dismiss(words)
        else:
            self.notify(f"type the words first ({shown(self.app, 'words.cancel', 'escape')[0]} cancels)",
                        severity="warning")

    def action_cancel(self) -> None:
        self.dismiss(None)


class ValueModal(ModalScreen[str | None]):
    """One value on one line (a setting): the cursor after what is there, Enter saves, Esc cancels.
    `save` runs on Enter; a value it refuses (UserError) is said in the dialog, which stays open with
    what was typed so the operator corrects it instead of typing it again."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="value.cancel")]

    def __init__(self, title: str, prompt: str, value: str = "",
                 save: Callable[[str], str | None] | None = None) -> None:
        super().__init__()
        self.title_text, self.prompt, self.value = title, prompt, value
        self.save = save

    def compose(self) -> ComposeResult:
        from textual.widgets import Input

        with Vertical(classes="dialog value") as box:
            box.border_title = self.title_text
            yield Static(self.prompt, classes="body")
            yield Input(self.value, id="value")
            yield Static("", id="value-error")
            yield Label(Text.assemble(("enter", "bold"), " save   ",
                                      (shown(self.app, "value.cancel", "escape")[0], "bold"), " cancel"),
                        classes="keys")

    def on_mount(self) -> None:
        from textual.widgets import Input

        box = self.query_one("#value", Input)
        box.cursor_blink = not self.app.is_headless
        box.focus()
        box.cursor_position = len(box.value)  # to change the value, not to type before it

    def on_input_submitted(self, event: Any) -> None:
        from pilothouse.providers.errors import UserError

        event.stop()
        raw = event.value
        try:
            said = self.save(raw) if self.save is not None else raw
        except UserError as exc:
            self.query_one("#value-error", Static).update(Text(str(exc), style="bold red"))
            return
        self.dismiss(said if said is not None else "")

    def action_cancel(self) -> None:
        self.dismiss(None)


class PickModal(ModalScreen[str | None]):
    """One of a few choices (a file to edit): enter takes the highlighted one, esc none."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="pick.cancel"),
        Binding("j", "move(1)", "Down", show=False, id="pick.down"),
        Binding("k", "move(-1)", "Up", show=False, id="pick.up"),
    ]

    def __init__(self, title: str, prompt: str, choices: list[str]) -> None:
        super().__init__()
        self.title_text, self.prompt, self.choices = title, prompt, choices

    def compose(self) -> ComposeResult:
        from textual.widgets import OptionList

        with Vertical(classes="dialog pick") as box:
            box.border_title = self.title_text
            yield Static(self.prompt, classes="body")
            # Text, not the string: a worker's file name must not be read as markup
            yield OptionList(*(Text(c) for c in self.choices), id="pick")
            yield Label("[b]enter[/b] open   [b]esc[/b] cancel", classes="keys")

    def on_mount(self) -> None:
        self.query_one("#pick").focus()

    def action_move(self, step: int) -> None:
        from textual.widgets import OptionList

        options = self.query_one("#pick", OptionList)
        options.highlighted = max(0, min(options.option_count - 1, (options.highlighted or 0) + step))

    def on_option_list_option_selected(self, event: Any) -> None:
        self.dismiss(self.choices[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)
