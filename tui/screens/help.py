"""`?` — every key, grouped; built from the same Binding objects the app uses (ids included)."""

from __future__ import annotations

from pilothouse.tui.bindings import FIX_BINDINGS, JOB_BINDINGS, REPLY_BINDINGS
from pilothouse.tui.format import REPLY_KEYS
from pilothouse.tui.screens.detail import RunDetail
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
    "job.ship": "ship the selected accepted job onto the base branch (asks first)",
    "job.usage": "tokens and money per provider, job and task; each job's budget",
    "app.settings": "every setting of .ai/project.yaml; enter edits one (checked, comments kept)",
}
FIX_HELP = {
    "fix.shell": "a shell in the task's worktree; on exit, the retry that takes your fix",
    "fix.edit": "$EDITOR on a file the task changed (never through a link)",
    "fix.diff": "the task's change against its base, file by file ([ ] to move)",
    "fix.gatelog": "every run of the task's gate, with search (/ n N)",
}
DETAIL_HELP = {
    "back": "back to the dashboard",
    "detail.follow": "follow the worker's output again",
    "detail.prev": "the task's previous run",
    "detail.next": "the task's next run",
}


def _section(title: str, rows: list[tuple[str, str, str]]) -> Table:
    table = Table(title=Text(title, style="bold"), title_justify="left", show_header=False, box=None,
                  padding=(0, 1), expand=True)
    table.add_column("key", style="bold", width=10, no_wrap=True)
    table.add_column("what", ratio=1)
    for key, what, _ in rows:  # the binding id stays in the rows, for the keymap; the operator needs the key
        table.add_row(key, what)
    return table


_KEY_NAMES = {"left_square_bracket": "[", "right_square_bracket": "]", "escape": "esc", "exclamation_mark": "!",
              "dollar_sign": "$"}


def _rows(bindings: list[Binding], text: dict[str, str]) -> list[tuple[str, str, str]]:
    return [(_KEY_NAMES.get(b.key, b.key), text.get(b.id or "", b.description), b.id or "") for b in bindings]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close"),
        Binding("j,down", "scroll(1)", "Down", show=False, id="help.down"),
        Binding("k,up", "scroll(-1)", "Up", show=False, id="help.up"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help") as box:
            box.border_title = "keys"
            yield Static(_section("Navigation", NAVIGATION))
            yield Static(_section("On a problem (Problems panel, or a stopped task)",
                                  _rows(REPLY_BINDINGS, {f"problem.{k}": v for k, v in REPLY_HELP.items()})))
            yield Static(_section("Jobs and workers", _rows(JOB_BINDINGS, JOB_HELP)))
            yield Static(_section("Fix in place (a task, a problem, a run detail)", _rows(FIX_BINDINGS, FIX_HELP)))
            detail = [b for b in RunDetail.BINDINGS if b.id in DETAIL_HELP]
            yield Static(_section("Run detail (enter on a task)", [
                *_rows(detail, DETAIL_HELP),
                (" ".join(REPLY_KEYS.values()), "answer the task's problem, as on the dashboard", "detail.reply")]))
            yield Static(Text("Every action goes through pilothouse's core and shows up when its event "
                              "arrives. esc closes.", style="dim"))

    def action_scroll(self, step: int) -> None:
        self.query_one(VerticalScroll).scroll_relative(y=step, animate=False, immediate=True)
