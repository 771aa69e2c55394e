"""MCP server figures: start-up (spawn to the initialize handshake answered, as a host sees it) and
the median `job_status` round-trip over stdio, both through the MCP SDK's own client.

    python bench/mcp.py [--starts 5] [--calls 50]

Goals (issue 14): start-up ≤ 0.5 s, job_status ≤ 50 ms. Prints figures; asserts nothing. On a
shared, busy machine wall-clock figures include the queue for the CPU: the load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# run as a script, this file's folder comes first on sys.path and its name would shadow the SDK
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def build_repo(root: Path) -> Path:
    """The demo's scratch project, set up, with one job of four tasks in state.db."""
    from pilothouse.core.demo import make_repo, test_command
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.repo_setup import init_project
    from pilothouse.core.state.store import connect

    repo = make_repo(root / "repo")
    init_project(repo, {"fast": test_command(), "full": test_command()}, stdin_is_tty=False)
    layout = RepoLayout(repo)
    create_job(layout, "bench", "Count the words of a text.")
    db = connect(layout.state_db)
    with db:
        db.execute("INSERT INTO jobs_state (job, state, revision, created_at, updated_at) VALUES "
                   "('bench', 'running', 1, '2026-11-29T06:00:00.000Z', '2026-11-29T07:00:00.000Z')")
        for n in range(4):
            db.execute("INSERT INTO tasks (job, task, state, kind, depends_on, provider, model, started_at, "
                       "updated_at) VALUES ('bench', ?, 'running', 'SAFE_PARALLEL', '[]', 'sim', 'sim-coder', "
                       "'2026-11-29T06:30:00.000Z', '2026-11-29T07:00:00.000Z')", (f"t{n}",))
    db.close()
    return repo


async def measure(repo: Path, starts: int, calls: int) -> tuple[list[float], list[float]]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "pilothouse", "mcp"], cwd=str(repo),
                                   env=dict(os.environ))
    start_s: list[float] = []
    call_s: list[float] = []
    for n in range(starts):
        t0 = time.perf_counter()
        async with Client(params, mode="legacy") as client:
            start_s.append(time.perf_counter() - t0)
            if n:
                continue
            await client.call_tool("job_status", {"name": "bench"})  # the first call imports core's modules
            for _ in range(calls):
                t1 = time.perf_counter()
                result = await client.call_tool("job_status", {"name": "bench"})
                call_s.append(time.perf_counter() - t1)
                assert not result.is_error, result.content
    return start_s, call_s


def sdk_import_cpu_s() -> float:
    """CPU seconds a fresh Python spends importing the MCP SDK: the floor under the start-up."""
    import subprocess

    code = "import time; t = time.process_time(); import mcp; print(time.process_time() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return float(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--starts", type=int, default=5, help="server starts timed (spawn -> tool list)")
    ap.add_argument("--calls", type=int, default=50, help="job_status round-trips timed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repo(Path(tmp))
        start_s, call_s = asyncio.run(measure(repo, args.starts, args.calls))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"server start-up (spawn -> initialized), median of {len(start_s)}: "
          f"{statistics.median(start_s) * 1000:.0f} ms (min {min(start_s) * 1000:.0f} ms; goal ≤ 500 ms)")
    print(f"  of which importing the MCP SDK: {sdk_import_cpu_s() * 1000:.0f} ms of CPU")
    print(f"job_status round-trip, median of {len(call_s)}: {statistics.median(call_s) * 1000:.1f} ms "
          f"(p90 {statistics.quantiles(call_s, n=10)[-1] * 1000:.1f} ms; goal ≤ 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
