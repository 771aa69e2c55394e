"""`?` — every key, grouped; built from the same Binding objects the app uses (ids included)."""

from __future__ import annotations

from pilothouse.tui.bindings import JOB_BINDINGS, REPLY_BINDINGS
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

NAVIGATION = [
    ("j k ↑ ↓", "move in the focused panel", "nav.down/up"),
    ("tab  1–5", "next panel / jump to a panel", "panel.N"),
    ("enter", "details: run of a task, answer a problem", "select"),
    ("esc", "back, close, clear the filter", "back"),
    ("/", "filter the focused panel", "filter"),
    ("f  End", "follow the event log again", "events.follow"),
    ("ctrl+p", "command palette", "app.palette"),
    ("ctrl+t", "light / dark theme", "app.theme"),
    ("?", "this help", "app.help"),
    ("q", "quit", "app.quit"),
]
REPLY_HELP = {
    "retry": "run the stopped step again (fix the cause first)",
    "accept": "take the builder's reviewed commit; checks must pass",
    "skip": "cancel the task and its dependents (asks first)",
    "dismiss": "close a request for more files; scope stays",
    "hint": "the same builder continues with your words",
    "plan": "the assigner re-plans the job with your words",
}
JOB_HELP = {
    "job.new": "new job: request, acceptance, attachments (ctrl+s saves)",
    "job.edit": "correct the selected job (revision goes up, re-plan)",
    "run.abort": "abort the selected task's worker (graceful, then kill)",
    "supervisor.toggle": "start the supervisor, or stop it",
}


def _section(title: str, rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title=Text(title, style="bold"), title_justify="left", show_header=False, box=None,
                  padding=(0, 1), expand=True)
    table.add_column("key", style="bold", width=10, no_wrap=True)
    table.add_column("what", ratio=1)
    table.add_column("id", style="dim", width=18, no_wrap=True)
    for key, what, bid in rows:
        table.add_row(key, what, bid)
    return table


def _rows(bindings: list[Binding], text: dict[str, str]) -> list[tuple[str, str, str]]:
    return [(b.key, text.get(b.id or "", b.description), b.id or "") for b in bindings]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help") as box:
            box.border_title = "keys"
            yield Static(_section("Navigation", NAVIGATION))
            yield Static(_section("On a problem (Problems panel, or a stopped task)",
                                  _rows(REPLY_BINDINGS, {f"problem.{k}": v for k, v in REPLY_HELP.items()})))
            yield Static(_section("Jobs and workers", _rows(JOB_BINDINGS, JOB_HELP)))
            yield Static(Text("Every action goes through pilothouse's core and shows up when its event "
                              "arrives. esc closes.", style="dim"))
