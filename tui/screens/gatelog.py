"""A task's gate output, every run of it, with search (G on a task, a problem or a run detail).

The output is what the work printed: each line passes `inert()` and is drawn as Text (no
markup), so it can neither restyle the screen nor reach the terminal as an escape sequence.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, RichLog, Static


def gate_lines(events: list[dict[str, Any]], evidence_tail: str | None = None, full: str | None = None) -> list[Text]:
    """One header per gate run (oldest first), then its output; a problem's own copy of the output
    when no gate event is left in the log's readable end. `full`: the last run's whole output, in
    place of the tail its event kept."""
    from pilothouse.providers.untrusted import inert
    from pilothouse.tui import format as fmt

    lines: list[Text] = []
    for n, ev in enumerate(events):
        data = ev.get("data") or {}
        ok = bool(data.get("passed"))
        head = Text(f"── {fmt.clock(ev.get('ts'))} {data.get('level') or data.get('gate') or 'gate'} ", style="bold")
        head.append("passed" if ok else "failed", style="green" if ok else "bold red")
        if data.get("exit_code") is not None:
            head.append(f" (exit {data['exit_code']})", style="dim")
        if data.get("duration_s") is not None:
            head.append(f" {data['duration_s']}s", style="dim")
        counts = data.get("counts")
        if isinstance(counts, dict):
            from pilothouse.core.git.gate_counts import counts_text

            head.append(f" {counts_text(counts)}", style="dim")
        elif data.get("counts_off"):
            head.append(" no counts (weakened-test count checks off)", style="dim")
        if data.get("reason"):
            head.append(f"  {inert(str(data['reason']))}", style="dim")
        lines.append(head)
        if data.get("command"):
            lines.append(Text(f"$ {inert(str(data['command']))}", style="dim"))
        last = n == len(events) - 1 and full is not None
        if last:
            lines.append(Text("(its whole output, kept by the supervisor)", style="dim italic"))
        for line in str(full if last else data.get("output_tail") or "").splitlines():
            lines.append(Text(inert(line.replace("\t", "    "))))
    if not events and evidence_tail:
        lines.append(Text("── the problem's copy of the gate output", style="bold"))
        lines += [Text(inert(line.replace("\t", "    "))) for line in evidence_tail.splitlines()]
    return lines


class GateLog(Screen[None]):
    """`/` searches (case-insensitive), `n`/`N` go to the next/previous match; matches are marked."""

    BINDINGS = [
        Binding("escape,q", "back", "Back", id="gatelog.back"),
        Binding("slash", "search", "Search", id="gatelog.search"),
        Binding("n", "match(1)", "Next match", id="gatelog.next"),
        Binding("N", "match(-1)", "Prev match", id="gatelog.prev"),
        Binding("j", "scroll(1)", "Down", show=False, id="gatelog.down"),
        Binding("k", "scroll(-1)", "Up", show=False, id="gatelog.up"),
    ]

    def __init__(self, title: str, lines: list[Text]) -> None:
        super().__init__()
        self.title_text, self.lines = title, lines
        self.needle = ""
        self.matches: list[int] = []
        self.at = -1

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title_text, style="bold"), id="gatelog-head")
        yield RichLog(id="gatelog-text", classes="panel", wrap=False, markup=False, highlight=False,
                      max_lines=200_000)
        yield Input(placeholder="search the gate output (enter keeps, esc clears)", id="gatelog-search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#gatelog-search", Input).display = False
        self._draw()
        text = self.query_one("#gatelog-text", RichLog)
        text.scroll_end(animate=False)  # the failure is at the end of a gate's output
        text.focus()

    def _draw(self) -> None:
        log = self.query_one("#gatelog-text", RichLog)
        log.clear()
        needle = self.needle.lower()
        self.matches = []
        if not self.lines:
            log.write(Text("no gate has run for this task yet", style="dim"))
        for n, line in enumerate(self.lines):
            if needle and needle in line.plain.lower():
                self.matches.append(n)
                line = line.copy()
                line.highlight_words([self.needle], style="black on yellow", case_sensitive=False)
            log.write(line)
        log.border_title = "gate output" + (f" · /{self.needle}: {len(self.matches)} match"
                                            f"{'es' * (len(self.matches) != 1)}" if self.needle else "")

    def action_search(self) -> None:
        box = self.query_one("#gatelog-search", Input)
        box.display = True
        box.value = self.needle
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.needle = event.value
        self._draw()
        self.at = -1
        if self.matches:
            self.action_match(1)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.query_one("#gatelog-text").focus()

    def action_match(self, step: int) -> None:
        if not self.matches:
            return
        self.at = (self.at + step) % len(self.matches)
        log = self.query_one("#gatelog-text", RichLog)
        log.scroll_to(y=max(0, self.matches[self.at] - log.size.height // 2), animate=False, immediate=True)

    def action_scroll(self, step: int) -> None:
        log = self.query_one("#gatelog-text", RichLog)
        log.scroll_to(y=max(0, log.scroll_y + step), animate=False, immediate=True)

    def action_back(self) -> None:
        box = self.query_one("#gatelog-search", Input)
        if box.display:
            box.value, box.display = "", False
            self.query_one("#gatelog-text").focus()
            return
        self.app.pop_screen()
