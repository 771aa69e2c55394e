"""The task's change against its base, one file at a time (D on a task, a problem or a run detail).

The worktree is the worker's: git reads it as the rest of pilothouse does (SAFE_GIT), with no
external diff driver or text conversion its attributes could ask for; every line passes
`inert()` before it is drawn and is drawn as a Text (no markup), so nothing the work wrote
can restyle the screen or move the terminal's cursor. A link is shown as git shows it (its
target's name), never followed.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, OptionList, RichLog, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:
    from pilothouse.core.queries.work import TaskRow
    from pilothouse.core.records.layout import RepoLayout

MAX_DIFF_BYTES = 4 << 20  # a worker can write a huge file: show the start of it, say the rest is cut
DIFF_ARGS = ("diff", "--no-ext-diff", "--no-textconv", "--no-color", "-M")


@dataclass(frozen=True)
class FileDiff:
    path: str
    lines: tuple[str, ...]
    added: int
    removed: int


def _clean(line: str) -> str:
    from pilothouse.providers.untrusted import inert

    return inert(line.replace("\t", "    "))


def split_files(text: str) -> list[FileDiff]:
    """git's unified diff cut at each `diff --git` header, with the counts of each file."""
    files: list[FileDiff] = []
    chunk: list[str] = []

    def close() -> None:
        if not chunk:
            return
        m = re.match(r"diff --git a/.* b/(.*)$", chunk[0])
        path = m.group(1) if m else chunk[0]
        added = sum(1 for ln in chunk if ln.startswith("+") and not ln.startswith("+++"))
        removed = sum(1 for ln in chunk if ln.startswith("-") and not ln.startswith("---"))
        files.append(FileDiff(_clean(path), tuple(_clean(ln) for ln in chunk), added, removed))

    for line in text.splitlines():
        if line.startswith("diff --git "):
            close()
            chunk = []
        chunk.append(line)
    close()
    return files


def task_diff(layout: RepoLayout, task: TaskRow, base: str) -> tuple[list[FileDiff], str]:
    """The task's files against `base` (the commit its worktree started from, or the integration
    branch): with the worktree, what is in it now (the operator's uncommitted fix too); without
    it (merged and cleaned up), its branch. Returns (files, a note: '' or why there is nothing)."""
    from pilothouse.core.git.worktrees import SAFE_GIT

    worktree = Path(task.worktree) if task.worktree else None
    if worktree is not None and worktree.is_dir() and not worktree.is_symlink():
        cwd: Path = worktree
        mb = subprocess.run([*SAFE_GIT, "merge-base", base, "HEAD"], cwd=cwd, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=30)
        args = [mb.stdout.strip() or base]
    elif task.branch:
        cwd, args = layout.root, [f"{base}...{task.branch}"]
    else:
        return [], "no branch yet: the task has not started"
    proc = subprocess.run([*SAFE_GIT, *DIFF_ARGS, *args, "--"], cwd=cwd, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return [], _clean(said[-1] if said else f"git diff failed (exit {proc.returncode})")
    raw = proc.stdout[:MAX_DIFF_BYTES].decode("utf-8", "replace")
    files = split_files(raw)
    note = "" if files else "no changes against the base"
    if len(proc.stdout) > MAX_DIFF_BYTES:
        note = f"cut at {MAX_DIFF_BYTES >> 20} MB: the rest is not shown"
    return files, note


def diff_line(line: str) -> Text:
    if line.startswith(("+++", "---", "diff --git", "index ", "new file", "deleted file", "similarity",
                        "rename ", "old mode", "new mode")):
        return Text(line, style="bold")
    if line.startswith("@@"):
        return Text(line, style="cyan")
    if line.startswith("+"):
        return Text(line, style="green")
    if line.startswith("-"):
        return Text(line, style="red")
    return Text(line)


class DiffScreen(Screen[None]):
    """Files on the left (counts of lines added and removed), the chosen file's diff on the right."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="diff.back"),
        Binding("right_square_bracket", "file(1)", "Next file", id="diff.next"),
        Binding("left_square_bracket", "file(-1)", "Prev file", id="diff.prev"),
        Binding("tab", "switch", "Files/diff", show=False, id="diff.switch"),
    ]

    def __init__(self, title: str, files: list[FileDiff], note: str = "") -> None:
        super().__init__()
        self.title_text, self.files, self.note = title, files, note

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title_text, style="bold") + Text(f"   {self.note}" if self.note else "",
                                                                 style="yellow"), id="diff-head")
        with Horizontal(id="diff-body"):
            yield OptionList(*(Option(self._label(f), id=str(n)) for n, f in enumerate(self.files)),
                             id="diff-files", classes="panel")
            yield RichLog(id="diff-text", classes="panel", wrap=False, markup=False, highlight=False,
                          max_lines=200_000)
        yield Footer()

    @staticmethod
    def _label(f: FileDiff) -> Text:
        return Text(f.path) + Text(f" +{f.added}", style="green") + Text(f" -{f.removed}", style="red")

    def on_mount(self) -> None:
        self.query_one("#diff-files").border_title = f"{len(self.files)} file{'s' * (len(self.files) != 1)}"
        if self.files:
            self.show_file(0)
            self.query_one("#diff-files", OptionList).highlighted = 0
        self.query_one("#diff-text").focus()

    def show_file(self, index: int) -> None:
        log = self.query_one("#diff-text", RichLog)
        log.clear()
        f = self.files[index]
        log.border_title = f.path
        for line in f.lines:
            log.write(diff_line(line))
        log.scroll_home(animate=False)
        self.current = index

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None and int(event.option.id) != getattr(self, "current", None):
            self.show_file(int(event.option.id))

    def action_file(self, step: int) -> None:
        if self.files:
            index = (getattr(self, "current", 0) + step) % len(self.files)
            self.query_one("#diff-files", OptionList).highlighted = index
            self.show_file(index)

    def action_switch(self) -> None:
        files, text = self.query_one("#diff-files"), self.query_one("#diff-text")
        (text if files.has_focus else files).focus()
