"""Cockpit figures: first paint on a 1,000,000-line events.jsonl, and the delay from an event appended
by another process to it being drawn.

    python bench/cockpit.py [--lines 1000000] [--events 300] [--keys 200]

Goals (issues 5 and 15): first paint ≤ 0.5 s with RSS ≤ 200 MB; p99 append→screen ≤ 100 ms; p99
keystroke→screen updated ≤ 100 ms.
Prints figures; asserts nothing. On a shared, busy machine wall-clock figures measure the queue for
the CPU: the load average is printed, and the first paint's CPU time too. `nice -n -19` (as root)
approximates a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_repo(root: Path, lines: int) -> Path:
    """A repository with a 50-task job in state.db and `lines` events in events.jsonl."""
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.state.store import connect

    repo = root / "repo"
    (repo / ".git").mkdir(parents=True)
    layout = RepoLayout(repo)
    db = connect(layout.state_db)
    with db:
        db.execute("INSERT INTO jobs_state (job, state, revision, created_at, updated_at) VALUES "
                   "('big', 'running', 1, '2026-11-29T06:00:00.000Z', '2026-11-29T07:00:00.000Z')")
        for n in range(50):
            deps = json.dumps([f"t{n - 1:02d}"] if n else [])
            db.execute("INSERT INTO tasks (job, task, state, kind, depends_on, provider, model, started_at, "
                       "updated_at) VALUES ('big', ?, 'running', 'SAFE_PARALLEL', ?, 'sim', 'sim-coder', "
                       "'2026-11-29T06:30:00.000Z', '2026-11-29T07:00:00.000Z')", (f"t{n:02d}", deps))
    db.close()
    t0 = time.perf_counter()
    with open(layout.events, "w") as fh:
        chunk = []
        for seq in range(1, lines + 1):
            chunk.append(json.dumps({"seq": seq, "ts": "2026-11-29T06:59:59.000Z", "type": "run.activity",
                                     "job": "big", "task": f"t{seq % 50:02d}", "run": f"r{seq % 50:02d}",
                                     "data": {"tool": f"edit src/m{seq % 97}.py"}}, separators=(",", ":")))
            if len(chunk) == 20000:
                fh.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            fh.write("\n".join(chunk) + "\n")
    size = layout.events.stat().st_size
    print(f"events.jsonl: {lines:,} lines, {size / 1e6:.0f} MB (written in {time.perf_counter() - t0:.1f} s)")
    return repo


FIRST_PAINT = textwrap.dedent("""
    import resource, sys, time
    t0 = time.perf_counter()
    from pathlib import Path
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.tui.app import CockpitApp
    t_import = time.perf_counter() - t0
    app = CockpitApp(RepoLayout(Path(sys.argv[1])), live=False)
    marks = {}

    async def pilot(p):
        # auto_pilot starts once the first screen is mounted; the pause lets that frame be drawn
        await p.pause()
        marks["painted"] = time.perf_counter()
        marks["cpu"] = time.process_time()
        app.exit()

    t1, c1 = time.perf_counter(), time.process_time()
    app.run(headless=True, size=(120, 40), auto_pilot=pilot)
    paint = marks["painted"] - t1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{t_import:.3f} {marks['cpu'] - c1:.3f} {paint:.3f} {rss:.0f}")
""")


def first_paint(repo: Path, tries: int = 3) -> None:
    """In a fresh process: import time, then app start → first painted frame; peak RSS."""
    results = []
    for _ in range(tries):
        out = subprocess.run([sys.executable, "-c", FIRST_PAINT, str(repo)], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout.split()
        results.append(tuple(float(x) for x in out[-4:]))
    best = min(results, key=lambda r: r[2])
    print(f"first paint (app start → first frame, store + last 500 events): best {best[2] * 1000:.0f} ms, "
          f"median {statistics.median(r[2] for r in results) * 1000:.0f} ms wall over {tries} runs; "
          f"{best[1] * 1000:.0f} ms of CPU (goal ≤ 500 ms)")
    print(f"  python imports before it (textual + pilothouse): {best[0] * 1000:.0f} ms")
    print(f"  peak RSS: {max(r[3] for r in results):.0f} MB (goal ≤ 200 MB)")


def terminal_paint(repo: Path) -> None:
    """The whole thing as a user sees it: `pilothouse view` in tmux until the Jobs panel shows."""
    if shutil.which("tmux") is None:
        print("terminal first paint: tmux not installed, skipped")
        return
    name = f"phbench{os.getpid()}"
    t0 = time.perf_counter()
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "40",
                    f"{sys.executable} -m pilothouse view {repo}"], check=True)
    try:
        while time.perf_counter() - t0 < 30:
            screen = subprocess.run(["tmux", "capture-pane", "-t", name, "-p"], capture_output=True,
                                    text=True).stdout
            if "Jobs" in screen and "t49" in screen or "t00" in screen:
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        print(f"terminal first paint (`pilothouse view` in tmux → panels on screen, incl. Python start): "
              f"{elapsed * 1000:.0f} ms")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


APPENDER = textwrap.dedent("""
    import random, sys, time
    from pathlib import Path
    from pilothouse.core.state.events import EventLog
    from pilothouse.core.state.store import connect
    repo, count = Path(sys.argv[1]), int(sys.argv[2])
    log = EventLog(repo / ".ai/runtime/events.jsonl")
    db = connect(repo / ".ai/runtime/state.db")
    time.sleep(1.0)
    rnd = random.Random(5)
    for n in range(count):
        task = f"t{n % 50:02d}"
        t = time.time()
        db.execute("UPDATE tasks SET activity=?, tokens=tokens+100 WHERE job='big' AND task=?", (f"bash step {n}", task))
        log.append("run.activity", job="big", task=task, data={"tool": f"bash step {n}", "t": t})
        time.sleep(rnd.uniform(0.005, 0.05))
""")


def latency(repo: Path, count: int) -> None:
    """Another process appends events (and updates the rows they name); the app records when each
    batch has been applied and the screen refreshed."""
    import asyncio

    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.tui.app import CockpitApp

    delays: list[float] = []
    app = CockpitApp(RepoLayout(repo), live=True)

    def seen(batch: list[dict]) -> None:
        now = time.time()
        delays.extend(now - e["data"]["t"] for e in batch if isinstance(e.get("data"), dict) and "t" in e["data"])

    app.on_batch = seen

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(repo), str(count)], cwd=ROOT)
            while proc.poll() is None or len(delays) < count:
                await pilot.pause(0.05)
                if proc.poll() is not None and len(delays) < count:
                    await pilot.pause(0.5)
                    break
            shown = app.dashboard.tasks.get_cell("t00", "activity")
            assert "bash step" in str(shown), shown

    asyncio.run(drive())
    delays.sort()
    q = statistics.quantiles(delays, n=100)
    print(f"append → on screen ({len(delays)} events from another process, each also updating its task row): "
          f"p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms "
          f"(goal p99 ≤ 100 ms)")


def keystrokes(repo: Path, count: int) -> None:
    """Keystroke → screen updated: a key pressed (j/k in Tasks, panel jumps 1–5, the run detail opened
    and closed) until the frame it changed has been refreshed, in-process (headless, 120x40)."""
    import asyncio

    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.tui.app import CockpitApp

    app = CockpitApp(RepoLayout(repo), live=True)
    times: dict[str, list[float]] = {"j/k": [], "1-5": [], "enter/esc": []}

    async def timed(pilot: object, kind: str, key: str) -> None:
        refreshed = asyncio.Event()
        t0 = time.perf_counter()
        await pilot.press(key)  # type: ignore[attr-defined]
        app.call_after_refresh(refreshed.set)  # the frame after the key's handlers ran
        await refreshed.wait()
        times[kind].append(time.perf_counter() - t0)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("3")
            for n in range(count):
                await timed(pilot, "j/k", "j" if (n // 20) % 2 == 0 else "k")
            for n in range(count // 4):
                await timed(pilot, "1-5", "12345"[n % 5])
            await pilot.press("3")
            for _ in range(count // 10):
                await timed(pilot, "enter/esc", "enter")
                await timed(pilot, "enter/esc", "escape")

    asyncio.run(drive())
    for kind, seen in times.items():
        seen.sort()
        q = statistics.quantiles(seen, n=100)
        print(f"keystroke → screen updated ({kind}, {len(seen)} keys): p50 {q[49] * 1000:.1f} ms, "
              f"p99 {q[98] * 1000:.1f} ms (goal p99 ≤ 100 ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--keys", type=int, default=200, help="j/k keystrokes timed (and a share of the others)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cpu, load average {load:.1f}")
    with tempfile.TemporaryDirectory(prefix="ph-bench-cockpit-") as tmp:
        os.environ["PILOTHOUSE_HOME"] = str(Path(tmp) / "home")
        repo = build_repo(Path(tmp), args.lines)
        first_paint(repo)
        terminal_paint(repo)
        latency(repo, args.events)
        keystrokes(repo, args.keys)


if __name__ == "__main__":
    main()
