"""Dispatch benchmarks: medians of 5 (run: python bench/dispatch.py).

- `pilothouse --help` wall                                  goal ≤ 0.05 s
- `pilothouse status` wall                                  goal ≤ 0.15 s
- dispatch overhead: `dispatch` wall against an instant sim served by this process, minus the
  time the sim itself spent answering (its request handlers, timed here)   goal ≤ 0.2 s
- a whole builtin explore run: `dispatch --provider sim --mode explore` wall, in-process sim
  start included                                            goal ≤ 0.3 s

Everything runs in a throwaway PILOTHOUSE_HOME with a small git repo; one warm-up run first
(it builds the provider index and byte-code caches, as any installed copy would have). On a busy
machine wall times mostly measure the queue for a CPU: the CPU column (user+sys of the whole
process tree) is then the better guide.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

N = 5
PY = sys.executable


CPU: list[float] = []  # CPU seconds (user+sys, whole process tree) of the last measured command


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    c = _cpu()
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    dt = time.perf_counter() - t
    CPU.append(_cpu() - c)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {r.stderr.decode()[-500:]}")
    return dt


def _median(fn, n: int = N) -> tuple[float, float]:
    """(median wall, median CPU) — CPU is the useful figure when the machine is busy."""
    fn()  # warm-up
    CPU.clear()
    walls = [fn() for _ in range(n)]
    return statistics.median(walls), statistics.median(CPU[-n:])


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pilothouse-bench-"))
    home = tmp / "home"
    repo = tmp / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    task = tmp / "task.md"
    task.write_text("Explain src/calc.py.\n")
    # measured as installed: with byte-code caches (kept out of the tree with a prefix), even when
    # the calling shell sets PYTHONDONTWRITEBYTECODE (then every import would compile its source)
    env = {**os.environ, "PILOTHOUSE_HOME": str(home)}
    env.pop("PILOTHOUSE_SIM_SCENARIO", None)
    # isolated as pilothouse starts its own dispatches (-I ignores PYTHON* variables, so the cache
    # prefix is an -X option)
    ph = [PY, "-I", "-X", f"pycache_prefix={tmp / 'pycache'}", "-m", "pilothouse"]

    help_s = _median(lambda: _wall([*ph, "--help"], env, tmp))
    status_s = _median(lambda: _wall([*ph, "status"], env, tmp))

    # an instant sim in this process; its handlers are timed so their time can be subtracted
    os.environ["PILOTHOUSE_HOME"] = str(home)
    from pilothouse.providers.sim import server as sim_server

    spent = [0.0]
    lock = threading.Lock()
    handler = sim_server._Handler
    original = handler.do_POST

    def timed(self):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return original(self)
        finally:
            with lock:
                spent[0] += time.perf_counter() - t

    handler.do_POST = timed  # type: ignore[method-assign]
    sim = sim_server.SimServer("explore-basic")
    base = sim.start()
    prov_dir = home / "config" / "providers"
    prov_dir.mkdir(parents=True, exist_ok=True)
    (prov_dir / "bench-sim.yaml").write_text(
        f"key: bench-sim\nprovider_id: bench\nmodel_id: sim-1\nbase_url: {base}/v1\n"
        "display_name: bench sim (external)\nneeds_key: false\n")
    argv = [*ph, "dispatch", "--provider", "bench-sim", "--mode", "explore", "--workdir", str(repo),
            "--task-file", str(task)]

    def overhead() -> float:
        with lock:
            spent[0] = 0.0
        wall = _wall(argv, env, tmp)
        with lock:
            return wall - spent[0]

    overhead_s = _median(overhead)
    sim.stop()
    explore_s = _median(lambda: _wall([*ph, "dispatch", "--provider", "sim", "--mode", "explore", "--workdir",
                                        str(repo), "--task-file", str(task)], env, tmp))
    rows = [("pilothouse --help", help_s, 0.05), ("pilothouse status", status_s, 0.15),
            ("dispatch overhead (minus sim time)", overhead_s, 0.2), ("builtin explore run on the sim", explore_s, 0.3)]
    print(f"medians of {N} (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    print(f"  {'':<38} {'wall':>8} {'cpu':>8}")
    for name, (wall, cpu), goal in rows:
        print(f"  {name:<38} {wall:7.3f}s {cpu:7.3f}s   goal ≤ {goal:.2f} s wall  {'ok' if wall <= goal else 'OVER'}")


if __name__ == "__main__":
    main()
