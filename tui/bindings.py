"""The cockpit's reply and job key bindings: the app binds them, the help screen lists them."""

from __future__ import annotations

from pilothouse.tui.format import REPLY_KEYS
from textual.binding import Binding

REPLY_BINDINGS = [Binding(key, f"reply('{reply}')", reply.capitalize(), id=f"problem.{reply}")
                  for reply, key in REPLY_KEYS.items()]
JOB_BINDINGS = [
    Binding("n", "new_job", "New job", id="job.new"),
    Binding("e", "edit_job", "Correct job", show=False, id="job.edit"),
    Binding("x", "abort_run", "Abort worker", id="run.abort"),
    Binding("P", "ship", "Ship", id="job.ship"),
    Binding("dollar_sign", "usage", "Usage", show=False, id="job.usage"),
    Binding("T", "timeline", "Timeline", show=False, id="job.timeline"),
    Binding("C", "settings", "Settings", show=False, id="app.settings"),
    Binding("S", "supervisor", "Supervisor", id="supervisor.toggle"),
]
# fixing in place (tui/fix.py): offered on a task, a problem or a run detail whose task has a worktree
FIX_BINDINGS = [
    Binding("exclamation_mark", "shell", "Shell", id="fix.shell"),
    Binding("E", "edit_file", "Edit", show=False, id="fix.edit"),
    Binding("D", "diff", "Diff", id="fix.diff"),
    Binding("G", "gate_log", "Gate log", show=False, id="fix.gatelog"),
]
