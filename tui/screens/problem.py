"""The problem answer dialog: what happened, the evidence, and the replies that fit — one key each."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

from pilothouse.core.stops.problems import Problem
from pilothouse.core.stops.replies import REPLY_HELP
from pilothouse.providers.untrusted import inert
from pilothouse.tui import format as fmt
from pilothouse.tui import keymap
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static

if TYPE_CHECKING:
    from pilothouse.tui.app import CockpitApp


def evidence_text(evidence: dict[str, Any]) -> Text:
    out = Text()
    for key, value in evidence.items():
        if isinstance(value, str) and "\n" in value:
            out.append(f"{key}:\n", style="bold")
            for line in value.rstrip().splitlines()[-12:]:
                out.append(f"  {fmt.words(line)}\n", style="dim")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            # findings, weakened tests: one line each, not a JSON list
            out.append(f"{key}:\n", style="bold")
            for item in value[:20]:
                out.append_text(item_line(item))
        else:
            shown = fmt.tilde(value) if key.endswith(("log", "path")) and isinstance(value, str) else value
            if not isinstance(shown, str):
                shown = json.dumps(shown, default=str)
            out.append(f"{key}: ", style="bold")
            out.append(f"{fmt.words(shown)}\n")
    return out


def item_line(item: dict[str, Any]) -> Text:
    """One finding ({severity, file_line, summary, suggested_fix}) or any other record, as a bullet."""
    line = Text("  • ")
    if "severity" in item or "summary" in item:
        line.append(f"[{item.get('severity', '?')}] ", style="yellow")
        if item.get("file_line"):
            line.append(fmt.words(f"{item['file_line']} "), style="dim")
        line.append(fmt.words(item.get("summary", "")))
        if item.get("suggested_fix"):
            line.append(fmt.words(f" (fix: {item['suggested_fix']})"), style="dim")
    else:
        line.append(fmt.words(" · ".join(f"{k} {v}" for k, v in item.items() if v not in (None, "", [], {}))))
    return line.append("\n")


def problem_context(p: Problem) -> Text:
    """What a hint or a plan answers: the reason, then the evidence (findings, the gate's output)."""
    out = fmt.styled(inert(p.summary) + "\n", "bold")  # the reason alone: Text(style=) would embolden the rest
    if p.evidence:
        out.append_text(evidence_text(p.evidence))
    out.rstrip()
    return out


class ProblemDialog(ModalScreen[None]):
    BINDINGS = [
        *(Binding(key, f"reply('{reply}')", reply, id=f"dialog.{reply}") for reply, key in fmt.REPLY_KEYS.items()),
        Binding("escape,q", "dismiss", "Close", id="dialog.close"),
    ]

    def __init__(self, problem: Problem, answered: str | None = None) -> None:
        super().__init__()
        self.problem = problem
        self.answered = answered  # the reply already given (here earlier, or elsewhere): no keys then
        self.answered_note = f"answered ({answered}) · waiting for the supervisor" if answered else ""

    def compose(self) -> ComposeResult:
        p = self.problem
        app: CockpitApp = self.app  # type: ignore[assignment]
        if self.answered is not None and not app.supervisor_alive():
            start = app.key_for("supervisor.toggle", "S")
            self.answered_note = f"answered ({self.answered}) · supervisor stopped: {start} starts it"
        with VerticalScroll(classes="dialog problem") as box:
            box.border_title = f"problem {p.code}"
            head = Text()
            head.append(f"{p.job}", style="bold")
            if p.task:
                head.append(f" / {p.task}", style="bold")
            head.append(f"   {p.kind}   opened {fmt.clock(p.opened_at)}", style="dim")
            yield Static(head)
            # the answer keys first: at 80x24 the evidence pushes anything after it below the fold
            yield Label(self._keys(), classes="keys", id="dialog-keys")
            yield Static(Text(inert(p.summary)), classes="body")
            if p.evidence:
                yield Static(evidence_text(p.evidence), classes="evidence")
        yield Footer()  # over the dashboard's: the keys shown are this dialog's

    def _keys(self) -> Text:
        keys = Text()
        if self.answered is not None:
            keys.append(self.answered_note, style="bold yellow")
            keys.append("  ")
        else:
            for reply in self.problem.replies:
                key = " ".join(keymap.shown(self.app, f"dialog.{reply}", fmt.REPLY_KEYS.get(reply, "?")))
                keys.append(f" {key} ", style="bold reverse")
                keys.append(f" {reply:<8}", style="bold")
                keys.append(f"{REPLY_HELP.get(reply, '')}\n", style="default")
        keys.append(f" {keymap.shown(self.app, 'dialog.close', 'escape')[0]} ", style="bold reverse")
        keys.append(" close")
        return keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reply":
            return self.answered is None and bool(parameters) and parameters[0] in self.problem.replies
        return True

    def on_repo_events(self, events: list[dict[str, Any]]) -> None:
        """Called by the app with each batch: an answer given elsewhere (the CLI, another cockpit)
        takes the keys away instead of leaving a stale dialog that would only be refused."""
        code = self.problem.code
        if self.answered is not None or not any(
                str(ev.get("type", "")).startswith("problem.") and (ev.get("data") or {}).get("code") == code
                for ev in events):
            return
        app: CockpitApp = self.app  # type: ignore[assignment]
        q = app.queries
        if q is None or not self.is_mounted:
            return  # not composed yet, or already gone: the next batch (or the reopened dialog) shows it
        try:
            row = q.problem(code)
            waiting = q.replies(code, waiting=True)
        except sqlite3.Error:
            return  # a busy or replaced state.db: a stale key is refused by core, never a crash here
        if waiting:
            self.answered = waiting[0].reply
            self.answered_note = f"answered ({self.answered}) elsewhere · waiting for the supervisor"
        elif row is None or row.state != "open":
            self.answered = (row.answer if row is not None else None) or "closed"
            self.answered_note = f"answered ({self.answered}) elsewhere"
        else:
            return
        self.query_one("#dialog-keys", Label).update(self._keys())
        self.refresh_bindings()

    def action_reply(self, reply: str) -> None:
        app: CockpitApp = self.app  # type: ignore[assignment]
        if self.answered is not None:
            return
        self.dismiss(None)
        app.answer(self.problem, reply)
