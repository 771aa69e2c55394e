"""`?` — every key, grouped; built from the same Binding objects the app uses, each shown with the key
the operator presses now (the keymap of tui/config.py applied), never its id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pilothouse.tui import keymap
from pilothouse.tui.bindings import FIX_BINDINGS, JOB_BINDINGS, REPLY_BINDINGS
from pilothouse.tui.screens.detail import RunDetail
from pilothouse.tui.screens.timeline import TimelineScreen
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from pilothouse.tui.app import CockpitApp

# (binding ids, keys of Textual's own, what): the ids' keys are looked up, so a remapped key shows
NAVIGATION = [
    (("nav.down", "nav.up"), "↑ ↓", "move in the focused panel"),
    (tuple(f"panel.{n}" for n in range(1, 6)), "tab", "next panel / jump to a panel"),
    ((), "enter", "details: run of a task, answer a problem"),
    (("back",), "", "back, close, clear the filter"),
    (("filter",), "", "filter the focused panel"),
    (("events.follow", "events.end"), "", "follow the event log again"),
    ((), "^p", "command palette (Change theme: every theme)"),
    (("app.theme",), "", "light / dark theme"),
    (("app.help",), "", "this help"),
    (("app.quit",), "", "quit"),
]
REPLY_HELP = {
    "retry": "run the stopped step again (fix the cause first)",
    "accept": "take the builder's commit; checks must pass (asks first)",
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
    "job.timeline": "the selected job's timeline: lanes per slot or task, problems, gates, merges",
    "app.settings": "every setting of .ai/project.yaml; enter edits one (checked, comments kept)",
}
FIX_HELP = {
    "fix.shell": "a shell in the task's worktree; on exit, the retry that takes your fix",
    "fix.edit": "$EDITOR on a file the task changed (never through a link)",
    "fix.diff": "the task's change against its base, file by file ([ ] to move)",
    "fix.gatelog": "every run of the task's gate, with search (/ n N, j k scroll)",
}
TIMELINE_HELP = {
    "timeline.open": "the run detail of the bar under the cursor",
    "timeline.lanes": "lanes per worker slot, or per task",
    "timeline.zoom_in": "zoom in (the chart scrolls with the cursor)",
    "timeline.zoom_out": "zoom out, down to the whole job",
    "timeline.replay": "replay: the job as it stood at a moment (← → move the moment), and back",
    "replay.play": "replay: play or pause",
    "replay.slower": "replay: slower (1× 10× 60× 600× the job's time)",
    "replay.faster": "replay: faster",
    "replay.next": "replay: to the next problem, failed gate or merge",
    "replay.prev": "replay: to the previous one",
    "replay.start": "replay: to the job's first event",
    "replay.end": "replay: to its last",
    "timeline.leave": "back, as esc; on a replay begun with R, to the timeline; on `pilothouse replay`, quit",
}
DETAIL_HELP = {
    "detail.back": "back to the dashboard (q goes back on every screen but the dashboard)",
    "detail.follow": "follow the worker's output again",
    "detail.prev": "the task's previous run",
    "detail.next": "the task's next run",
}


def _section(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=Text(title, style="bold"), title_justify="left", show_header=False, box=None,
                  padding=(0, 1), expand=True)
    table.add_column("key", style="bold", width=10, no_wrap=True)
    table.add_column("what", ratio=1)
    for key, what in rows:
        table.add_row(key, what)
    return table


def _rows(bindings: list[Binding], text: dict[str, str], keys: dict[str, str]) -> list[tuple[str, str]]:
    return [(keys.get(b.id or "", keymap.display(b.key)), text.get(b.id or "", b.description)) for b in bindings]


def _navigation(keys: dict[str, str]) -> list[tuple[str, str]]:
    rows = []
    for ids, own, what in NAVIGATION:
        shown = [keys[i] for i in ids if i in keys]
        if shown == [str(n) for n in range(1, 6)]:
            shown = ["1–5"]
        rows.append((" ".join(x for x in ((own, *shown) if own == "tab" else (*shown, own)) if x), what))
    return rows


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close"),
        Binding("j,down", "scroll(1)", "Down", show=False, id="help.down"),
        Binding("k,up", "scroll(-1)", "Up", show=False, id="help.up"),
    ]

    @property
    def cockpit(self) -> CockpitApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        app = self.cockpit
        keys = {row["id"]: row["shown"] for row in keymap.listing(app.keymap, app.scopes())}
        with VerticalScroll(classes="dialog help") as box:
            box.border_title = "keys"
            yield Static(_section("Navigation", _navigation(keys)))
            yield Static(_section("On a problem (Problems panel, or a stopped task)",
                                  _rows(REPLY_BINDINGS, {f"problem.{k}": v for k, v in REPLY_HELP.items()}, keys)))
            yield Static(_section("Jobs and workers", _rows(JOB_BINDINGS, JOB_HELP, keys)))
            # one row an id (q's three bindings are one), in TIMELINE_HELP's order
            shown = [b for b in TimelineScreen.BINDINGS if isinstance(b, Binding) and b.id in TIMELINE_HELP]
            timeline = sorted({b.id: b for b in reversed(shown)}.values(),
                              key=lambda b: list(TIMELINE_HELP).index(b.id or ""))
            moves = " ".join(keys.get(i, "") for i in ("timeline.prev", "timeline.next", "timeline.up", "timeline.down"))
            yield Static(_section("Timeline (T on a job)", [
                (moves, "from bar to bar along a lane, from lane to lane"), *_rows(timeline, TIMELINE_HELP, keys)]))
            yield Static(_section("Fix in place (a task, a problem, a run detail)",
                                  _rows(FIX_BINDINGS, FIX_HELP, keys)))
            detail = [b for b in RunDetail.BINDINGS if b.id in DETAIL_HELP]
            replies = [keys[f"detail.{r}"] for r in REPLY_HELP]
            yield Static(_section("Run detail (enter on a task)", [
                *_rows(detail, DETAIL_HELP, keys),
                (" ".join(replies), "answer the task's problem, as on the dashboard")]))
            yield Static(Text("Every action goes through pilothouse's core and shows up when its event "
                              "arrives. esc closes.", style="dim"))

    def action_scroll(self, step: int) -> None:
        self.query_one(VerticalScroll).scroll_relative(y=step, animate=False, immediate=True)
