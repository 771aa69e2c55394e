"""The problem answer dialog: what happened, the evidence, and the replies that fit — one key each."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pilothouse.core.queries_problems import ProblemRow
from pilothouse.tui import format as fmt
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

if TYPE_CHECKING:
    from pilothouse.tui.app import CockpitApp


def evidence_text(evidence: dict[str, Any]) -> Text:
    out = Text()
    for key, value in evidence.items():
        if isinstance(value, str) and "\n" in value:
            out.append(f"{key}:\n", style="bold")
            for line in value.rstrip().splitlines()[-12:]:
                out.append(f"  {line}\n", style="dim")
        else:
            shown = fmt.tilde(value) if key.endswith(("log", "path")) and isinstance(value, str) else value
            if not isinstance(shown, str):
                shown = json.dumps(shown, default=str)
            out.append(f"{key}: ", style="bold")
            out.append(f"{shown}\n")
    return out


class ProblemDialog(ModalScreen[None]):
    BINDINGS = [
        *(Binding(key, f"reply('{reply}')", reply, id=f"dialog.{reply}") for reply, key in fmt.REPLY_KEYS.items()),
        Binding("escape,q", "dismiss", "Close", id="dialog.close"),
    ]

    def __init__(self, problem: ProblemRow) -> None:
        super().__init__()
        self.problem = problem

    def compose(self) -> ComposeResult:
        p = self.problem
        with VerticalScroll(classes="dialog problem") as box:
            box.border_title = f"problem {p.code}"
            head = Text()
            head.append(f"{p.job}", style="bold")
            if p.task:
                head.append(f" / {p.task}", style="bold")
            head.append(f"   {p.kind}   opened {fmt.clock(p.opened_at)}", style="dim")
            yield Static(head)
            yield Static(Text(p.summary), classes="body")
            if p.evidence:
                yield Static(evidence_text(p.evidence), classes="evidence")
            keys = Text()
            for reply in p.replies:
                key = fmt.REPLY_KEYS.get(reply, "?")
                keys.append(f" {key} ", style="bold reverse")
                keys.append(f" {reply}  ")
            keys.append(" esc ", style="bold reverse")
            keys.append(" close")
            yield Label(keys, classes="keys")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reply":
            return bool(parameters) and parameters[0] in self.problem.replies
        return True

    def action_reply(self, reply: str) -> None:
        app: CockpitApp = self.app  # type: ignore[assignment]
        self.dismiss(None)
        app.answer(self.problem, reply)
