"""The demo job's event log as one real run of `pilothouse demo` wrote it (tests/tui/fixtures/demo_events.jsonl),
for pictures that must be the same every run: a fresh demo's three builders finish in a different order
each time, and its clock is the wall clock. `record()` made the file from a real run (times moved to the
cockpit fixture's day, run ids with them, this machine's paths taken out); `demo_layout()` puts it in a
repository whose store knows the job, so the dashboard selects it."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path

from cockpit_support import T0
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.state.store import connect

FIXTURE = Path(__file__).parent / "fixtures" / "demo_events.jsonl"
_RUN_ID = re.compile(r"\b(\d{8}T\d{6}Z)(-[0-9a-f]{8})\b")


def record(events: Path, dest: Path = FIXTURE, local: tuple[str, ...] = ()) -> None:
    """A real demo log, moved to start at T0; each of `local` (paths of this machine) becomes `~`."""
    lines = events.read_text().splitlines()
    shift = T0 - datetime.fromisoformat(json.loads(lines[0])["ts"])

    def run_id(m: re.Match[str]) -> str:
        at = datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ") + shift
        return at.strftime("%Y%m%dT%H%M%SZ") + m.group(2)

    out = []
    for line in lines:
        for path in local:
            line = line.replace(path, "~")
        ev = json.loads(_RUN_ID.sub(run_id, line))
        at = datetime.fromisoformat(ev["ts"]) + shift
        ev["ts"] = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
        out.append(json.dumps(ev, separators=(",", ":")))
    dest.write_text("\n".join(out) + "\n")


def demo_layout(root: Path) -> RepoLayout:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    layout = RepoLayout(root)
    layout.runtime.mkdir(parents=True, exist_ok=True)
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    tokens = sum(e["data"].get("tokens") or 0 for e in events if e["type"] == "run.finished")
    db = connect(layout.state_db)  # before the log: a log without its store reads as a lost store
    with db:
        db.execute("INSERT INTO jobs_state VALUES ('demo','accepted',1,1,'sim',?,NULL,?,?,?)",
                   (tokens, events[0]["ts"], events[-1]["ts"], events[-1]["ts"]))
    db.close()
    layout.events.write_bytes(FIXTURE.read_bytes())
    return layout
