"""Choosing a repository when several are registered and none was given."""

from __future__ import annotations

from pilothouse.core.records.layout import RepoLayout
from pilothouse.tui.format import styled, tilde
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class RepoPicker(ModalScreen[RepoLayout | None]):
    BINDINGS = [
        Binding("escape,q", "cancel", "Quit", id="picker.cancel"),
        Binding("j", "down", show=False, id="picker.down"),
        Binding("k", "up", show=False, id="picker.up"),
    ]

    def __init__(self, repos: list[RepoLayout]) -> None:
        super().__init__()
        self.repos = repos

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "repositories"
            # Text, not markup: a path may hold "[" (and a name is shown exactly as the directory's)
            yield OptionList(*(Option(styled(r.root.name, "bold") + styled(f"  {tilde(r.root)}", "dim"),
                                      id=str(i)) for i, r in enumerate(self.repos)))
            yield Label("[b]enter[/b] open   [b]esc[/b] quit", classes="keys")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.repos[int(event.option.id or 0)])

    def action_down(self) -> None:
        self.query_one(OptionList).action_cursor_down()

    def action_up(self) -> None:
        self.query_one(OptionList).action_cursor_up()

    def action_cancel(self) -> None:
        self.dismiss(None)
