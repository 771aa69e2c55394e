"""MCP server figures: ready (spawn to `initialize` and `tools/list` answered, as a host sees it, and as
an agent CLI sees a worker's server that dispatch set up), the first tool call (which waits for the MCP SDK the server imports meanwhile) and the median
`job_status` round-trip over stdio, all through the MCP SDK's own client.

    python bench/mcp.py [--starts 5] [--calls 50]

Goals (issues 14 and 34): ready ≤ 0.3 s on a quiet machine, job_status ≤ 50 ms. One start before
the timed ones records the handshake for the next starts, as the first start after an install does. Prints figures; asserts nothing. On a
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


async def measure(repo: Path, starts: int, calls: int) -> tuple[list[float], list[float], list[float]]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "pilothouse", "mcp"], cwd=str(repo),
                                   env=dict(os.environ))
    start_s: list[float] = []
    first_s: list[float] = []
    call_s: list[float] = []
    for n in range(starts + 1):
        t0 = time.perf_counter()
        async with Client(params, mode="legacy") as client:
            tools = await client.list_tools()
            if n == 0:
                continue  # the first start after an install records the handshake (core/mcp/front.py)
            start_s.append(time.perf_counter() - t0)
            assert any(t.name == "job_status" for t in tools.tools)
            await client.call_tool("job_status", {"name": "bench"})  # waits for the SDK and core's modules
            first_s.append(time.perf_counter() - t0)
            if n > 1:
                continue
            for _ in range(calls):
                t1 = time.perf_counter()
                result = await client.call_tool("job_status", {"name": "bench"})
                call_s.append(time.perf_counter() - t1)
                assert not result.is_error, result.content
    return start_s, first_s, call_s


async def measure_worker(repo: Path, starts: int) -> list[float]:
    """A worker's server (`mcp --worker`) in the context folder a dispatch writes for its run."""
    import threading

    from mcp import Client, StdioServerParameters
    from pilothouse.core.dispatch import handshake
    from pilothouse.core.dispatch.jobcontext import write_job_context

    sandbox = repo.parent / "run"
    sandbox.mkdir()
    write_job_context(repo, "bench", sandbox)  # the first dispatch makes the record, in the background
    for t in threading.enumerate():
        if t.name == handshake.RECORDER:
            t.join()
    server = write_job_context(repo, "bench", sandbox)
    assert server is not None
    params = StdioServerParameters(command=server["command"], args=server["args"], cwd=str(sandbox),
                                   env=dict(os.environ))
    ready: list[float] = []
    for _ in range(starts):
        t0 = time.perf_counter()
        async with Client(params, mode="legacy") as client:
            tools = await client.list_tools()
            ready.append(time.perf_counter() - t0)
            assert any(t.name == "job_request" for t in tools.tools)
    return ready


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
        start_s, first_s, call_s = asyncio.run(measure(repo, args.starts, args.calls))
        worker_s = asyncio.run(measure_worker(repo, args.starts))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"server ready (spawn -> initialize and tools/list answered), median of {len(start_s)}: "
          f"{statistics.median(start_s) * 1000:.0f} ms (min {min(start_s) * 1000:.0f} ms; goal ≤ 300 ms)")
    print(f"a worker's server ready (as an agent CLI in the run starts it), median of {len(worker_s)}: "
          f"{statistics.median(worker_s) * 1000:.0f} ms (min {min(worker_s) * 1000:.0f} ms)")
    print(f"first tool call answered (spawn -> job_status, the SDK imported meanwhile): median "
          f"{statistics.median(first_s) * 1000:.0f} ms (min {min(first_s) * 1000:.0f} ms)")
    print(f"  importing the MCP SDK, which the handshake no longer waits for: {sdk_import_cpu_s() * 1000:.0f} ms "
          "of CPU")
    print(f"job_status round-trip, median of {len(call_s)}: {statistics.median(call_s) * 1000:.1f} ms "
          f"(p90 {statistics.quantiles(call_s, n=10, method='inclusive')[-1] * 1000:.1f} ms; goal ≤ 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
