"""`pilothouse --help` beside `pilot-workers --help`, run in turns on the same machine (run: python bench/help.py).

    python bench/help.py                                  # both console scripts found on PATH / beside this Python
    python bench/help.py --pilot-workers /venv/bin/pilot-workers --runs 30

Each round runs one, then the other (in turns, so a change in the machine's load falls on both);
prints the median wall and CPU (user+sys) of each and their ratio. Goal (issue 34): pilothouse ≤ 1.5×
pilot-workers' wall. pilot-workers is the PyPI package of that name (`pip install pilot-workers` in a
venv of its own). Prints figures; asserts nothing; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--runs", type=int, default=20, help="rounds (each runs both once)")
    ap.add_argument("--pilot-workers", default=shutil.which("pilot-workers"), help="its console script")
    ap.add_argument("--pilothouse", default=str(Path(sys.executable).with_name("pilothouse")),
                    help="pilothouse's console script")
    a = ap.parse_args()
    if not a.pilot_workers or not Path(a.pilot_workers).exists():
        print("pilot-workers not found: install it in a venv of its own and pass --pilot-workers PATH")
        return 1
    load = os.getloadavg()
    tools = {"pilothouse": [a.pilothouse, "--help"], "pilot-workers": [a.pilot_workers, "--help"]}
    for argv in tools.values():
        _timed(argv)  # warm-up: byte-code caches and the page cache, as any installed copy has
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    for _ in range(a.runs):
        for name, argv in tools.items():
            figures[name].append(_timed(argv))
    print(f"load average before {' '.join(f'{x:.2f}' for x in load)}, after "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; {a.runs} runs each, in turns")
    med = {}
    for name, runs in figures.items():
        med[name] = (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        print(f"  {name + ' --help':<26} wall median {med[name][0] * 1000:6.1f} ms (min "
              f"{min(w for w, _ in runs) * 1000:6.1f})   CPU median {med[name][1] * 1000:6.1f} ms")
    print(f"  ratio pilothouse / pilot-workers: wall {med['pilothouse'][0] / med['pilot-workers'][0]:.2f}×, "
          f"CPU {med['pilothouse'][1] / med['pilot-workers'][1]:.2f}×   (goal ≤ 1.5× wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
