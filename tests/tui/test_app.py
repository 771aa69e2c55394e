"""The app's start: what stands between `pilothouse view` and its first frame."""

from __future__ import annotations

FIRST_FRAME = """
import sys
from pathlib import Path
from textual.app import App
from pilothouse.core.records.layout import RepoLayout
from pilothouse.tui.app import CockpitApp

seen = {}
display = App._display

def first(self, screen, renderable):
    if renderable is not None and "rows" not in seen:
        seen["rows"] = self.screen.query_one("#tasks-table").row_count
        seen["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "pydantic" or m.startswith(
            ("pilothouse.core.records.jobs", "pilothouse.core.records.project", "pilothouse.tui.screens.detail")))
    return display(self, screen, renderable)

App._display = first
app = CockpitApp(RepoLayout(Path(sys.argv[1])), live=False)

async def pilot(p):
    await p.pause()
    seen["status"] = app.status_line().plain
    app.exit()

app.run(headless=True, size=(120, 40), auto_pilot=pilot)
print(seen)
"""


def test_the_first_frame_waits_for_no_record_models(cockpit_repo) -> None:
    """The store's rows are in the first frame; the job and project record models (pydantic, a good part
    of the start-up) and the run detail's modules are loaded only after it."""
    import ast
    import subprocess
    import sys

    from pilothouse.providers import provider_index
    from support import guard

    provider_index.records()  # the providers' cache, as any earlier command leaves it
    cockpit_repo.project_yaml.write_text("gates: [")  # a broken file: its error still reaches the status line
    proc = subprocess.run([sys.executable, "-c", FIRST_FRAME, str(cockpit_repo.root)], capture_output=True, text=True,
                          timeout=guard(120))
    assert proc.returncode == 0, proc.stderr
    seen = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 5  # first-draft's tasks
    assert seen["loaded"] == []
    assert "bad .ai/project.yaml" in seen["status"]
