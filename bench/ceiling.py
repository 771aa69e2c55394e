"""How many workers one machine holds, by worker kind (run: nice -n 10 python bench/ceiling.py).

    python bench/ceiling.py                      # every kind, N = 1, 2, 4, 8, 16 (about 10 minutes on 2 cores)
    python bench/ceiling.py --kinds builtin,codex
    python bench/ceiling.py --quick              # N = 1 and 2 only, to try the script itself

Each worker kind — the builtin runner, OpenCode, Claude Code, Codex — runs the same scripted code
task (data/scenarios/code-basic.yaml: write a file, read it, edit it, run a command, report) as
`pilothouse dispatch --provider sim|sim-opencode|sim-claude|sim-codex`, exactly as the supervisor
starts a builder: the real CLI, confined by bubblewrap, talking to the simulator on loopback. N runs
start at once, each in its own git repository; N doubles until throughput (runs a minute) stops
rising by RISE, or the kind's share of the time budget is spent. Printed for each kind:

- first run: the kind's first run in the bench's new home (what a new machine pays once for it);
- start-up: from spawning the dispatch to the model's first answer (the CLI's boot, the sandbox);
- wall and CPU per run (CPU of the whole process tree: dispatch, bubblewrap, the CLI, its tools,
  and the in-process simulator, which a real provider would not cost);
- peak memory per worker: the largest sum of resident memory over the run's process tree (pages
  shared between processes count once per process, so this is an upper bound);
- runs a minute at each N, and the ceiling: the N past which doubling the workers added less than
  RISE to throughput on this machine;
- the runs a minute the CPUs would allow if nothing else ran: cores × 60 ÷ CPU per run (on a
  shared machine, the figure to compare machines by).

The simulator answers at once, so a run here is all CPU: the ceiling is what the workers' own CPU
allows. With a real model a run mostly waits for the model, and the machine holds about
cores × (wall of a real run) ÷ (CPU per run) workers before the CPU is full. The load average is
printed beside every batch: on a machine other work shares, the figures measure that queue too.
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
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"builtin": "sim", "codex": "sim-codex", "claude-code": "sim-claude", "opencode": "sim-opencode"}
SCENARIO = "code-basic"
RISE = 1.15  # doubling N must add this much throughput to count as still rising
INTERVAL = 0.2  # seconds between two looks at /proc
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Sample:
    """One run, measured."""
    kind: str
    n: int  # runs started at once in its batch
    wall: float
    cpu: float  # seconds, the whole process tree
    rss_mb: float  # peak resident memory of the process tree
    startup: float | None  # spawn → the model's first answer; None when the model was never asked
    verdict: str


@dataclass
class Batch:
    kind: str
    n: int
    wall: float  # first spawn to last exit
    load: float  # 1-minute load average when the batch ended
    samples: list[Sample] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(s.verdict == "completed" for s in self.samples)

    @property
    def per_minute(self) -> float:
        return self.completed * 60 / self.wall if self.wall > 0 else 0.0


# ------------------------------------------------------------------ the table (pure)

def ceiling(per_minute: dict[int, float], rise: float = RISE) -> tuple[int, bool]:
    """(N, saturated): the N with the most throughput before doubling N stopped adding `rise`;
    saturated is False when the largest N measured still rose (the ceiling is above it)."""
    if not per_minute:
        raise ValueError("no batch to judge")
    ns = sorted(per_minute)
    best = ns[0]
    for n in ns[1:]:
        if per_minute[n] < per_minute[best] * rise:
            return best, True
        best = n
    return best, False


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(batches: list[Batch], first_runs: dict[str, float], cores: int) -> str:
    """The per-kind summary and the per-batch detail, as Markdown tables."""
    kinds = list(dict.fromkeys(b.kind for b in batches))
    ns = sorted({b.n for b in batches})
    head = ["worker kind", "first run", "start-up", "wall per run", "CPU per run", "peak memory per worker",
            *[f"runs/min at N={n}" for n in ns], "ceiling", f"runs/min {cores} idle CPUs allow"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind in kinds:
        mine = {b.n: b for b in batches if b.kind == kind}
        ok = [s for b in mine.values() for s in b.samples if s.verdict == "completed"]
        one = [s for s in mine[min(mine)].samples if s.verdict == "completed"]
        starts = [s.startup for s in one if s.startup is not None]
        rates = {n: b.per_minute for n, b in mine.items() if b.completed}
        if len(rates) == 1:
            top = f"not judged (only N={min(rates)} ran)"
        elif rates:
            n, saturated = ceiling(rates)
            top = f"N={n}" if saturated else f"N≥{n} (still rising)"
        else:
            top = "no run completed"
        first = first_runs.get(kind)
        cells = [kind, f"{first:.1f} s" if first is not None else "–",
                 f"{_med(starts):.1f} s" if starts else "–",
                 f"{_med([s.wall for s in one]):.1f} s" if one else "–",
                 f"{_med([s.cpu for s in ok]):.1f} s" if ok else "–",
                 f"{_med([s.rss_mb for s in ok]):.0f} MB" if ok else "–",
                 *[f"{rates[n]:.1f}" if n in rates else "–" for n in ns], top,
                 f"{cores * 60 / _med([s.cpu for s in ok]):.0f}" if ok else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| worker kind | N | batch wall | runs/min | wall per run | CPU per run | start-up | failed | load |",
              "|---|---|---|---|---|---|---|---|---|"]
    for b in batches:
        ok = [s for s in b.samples if s.verdict == "completed"]
        starts = [s.startup for s in ok if s.startup is not None]
        failed = len(b.samples) - len(ok)
        lines.append(f"| {b.kind} | {b.n} | {b.wall:.1f} s | {b.per_minute:.1f} | "
                     f"{_med([s.wall for s in ok]):.1f} s | {_med([s.cpu for s in ok]):.1f} s | "
                     f"{_med(starts):.1f} s | {failed or ''} | {b.load:.1f} on {cores} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ measuring

def _procs() -> dict[int, tuple[int, int, int]]:
    """pid → (parent, CPU ticks of it and its reaped children, resident pages), from /proc.
    Read by hand: psutil is not a dependency, and three fields of one file are all this needs."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        f = raw[raw.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
        out[int(name)] = (int(f[1]), int(f[11]) + int(f[12]) + int(f[13]) + int(f[14]), int(f[21]))
    return out


def tree(root: int, procs: dict[int, tuple[int, int, int]]) -> set[int]:
    """The root and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            seen.add(child)
            todo.append(child)
    return seen


class TreeWatch(threading.Thread):
    """Samples each watched run's processes (`tree`). A run's own rusage cannot give its CPU:
    bubblewrap's monitor exits without reaping the sandbox's init, so nothing inside the sandbox is
    ever added to the launcher's children's usage. The most the processes other than the dispatch held at once is
    what they spent (a process's CPU moves into its parent's when the parent reaps it); the
    dispatch's own, with the children it reaped, comes from its wait status at the end."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lock = threading.Lock()
        self.cpu: dict[int, int] = {}  # root pid → most ticks its descendants held at once
        self.rss: dict[int, int] = {}  # root pid → most pages the whole tree held at once
        self.stop = threading.Event()

    def watch(self, pid: int) -> None:
        with self.lock:
            self.cpu[pid], self.rss[pid] = 0, 0

    def run(self) -> None:
        while not self.stop.wait(INTERVAL):
            procs = _procs()
            with self.lock:
                roots = [p for p in self.cpu if p in procs]
            for root in roots:
                members = tree(root, procs)
                cpu = sum(procs[p][1] for p in members if p != root)
                rss = sum(procs[p][2] for p in members)
                with self.lock:
                    self.cpu[root] = max(self.cpu[root], cpu)
                    self.rss[root] = max(self.rss[root], rss)


def _first_answer(sandbox: Path) -> float | None:
    served = sandbox / "state" / "served.jsonl"
    try:
        first = served.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return datetime.fromisoformat(json.loads(first)["ts"].replace("Z", "+00:00")).timestamp()


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {**os.environ, "PILOTHOUSE_HOME": str(tmp / "pilothouse"), "HOME": str(tmp / "home"),
                    **{v: str(tmp / "home" / sub) for v, sub in (("XDG_CONFIG_HOME", ".config"),
                       ("XDG_DATA_HOME", ".local/share"), ("XDG_STATE_HOME", ".local/state"),
                       ("XDG_CACHE_HOME", ".cache"))}}
        self.env.pop("PILOTHOUSE_SIM_SCENARIO", None)
        if "PILOTHOUSE_TEST_RUNNERS" not in self.env and (ROOT / ".runners").is_dir():
            self.env["PILOTHOUSE_TEST_RUNNERS"] = str(ROOT / ".runners")
        os.environ.update(self.env)  # for the sandbox paths this process reads
        (tmp / "home").mkdir(parents=True)
        self.task = tmp / "task.md"
        self.task.write_text("Add a slugify helper in src/slug.py.\n")
        self.repos: list[Path] = []
        self.watcher = TreeWatch()
        self.watcher.start()

    def repo(self, i: int) -> Path:
        """Worker i's own repository, back at its first commit."""
        while len(self.repos) <= i:
            repo = self.tmp / "repos" / f"w{len(self.repos)}"
            (repo / "src").mkdir(parents=True)
            (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
            git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
            subprocess.run([*git, "init", "-q"], check=True)
            subprocess.run([*git, "add", "-A"], check=True)
            subprocess.run([*git, "commit", "-qm", "start"], check=True)
            self.repos.append(repo)
        repo = self.repos[i]
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "."], check=True)
        subprocess.run(["git", "-C", str(repo), "clean", "-qfdx"], check=True)
        return repo

    def batch(self, kind: str, n: int) -> Batch:
        from pilothouse.providers import paths

        provider = KINDS[kind]
        argv = [sys.executable, "-m", "pilothouse", "dispatch", "--provider", provider, "--mode", "code",
                "--task-file", str(self.task), "--scenario", SCENARIO, "--timeout", "600"]
        repos = [self.repo(i) for i in range(n)]
        ended: dict[int, tuple[float, float]] = {}

        def reap(proc: subprocess.Popen[bytes]) -> None:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            ended[proc.pid] = (time.time(), usage.ru_utime + usage.ru_stime)

        procs, reapers = [], []
        t0 = time.time()
        for i, repo in enumerate(repos):
            err = open(self.tmp / f"{kind}-{n}-{i}.err", "wb")
            proc = subprocess.Popen([*argv, "--workdir", str(repo)], env=self.env, stdout=subprocess.PIPE,
                                    stderr=err, stdin=subprocess.DEVNULL)
            err.close()
            self.watcher.watch(proc.pid)
            procs.append((proc, time.time()))
            reapers.append(threading.Thread(target=reap, args=(proc,)))
            reapers[-1].start()
        for r in reapers:
            r.join()
        out = Batch(kind, n, max(e for e, _ in ended.values()) - t0, os.getloadavg()[0])
        for proc, spawned in procs:
            end, own = ended[proc.pid]
            assert proc.stdout is not None
            lines = [json.loads(ln) for ln in proc.stdout.read().decode().splitlines() if ln.startswith("{")]
            proc.stdout.close()
            verdict = lines[-1].get("verdict", "?") if len(lines) == 2 else f"exit {proc.returncode}"
            first = _first_answer(paths.providers_dir() / provider / "runs" / lines[0]["run_id"]) if lines else None
            with self.watcher.lock:
                cpu = self.watcher.cpu.pop(proc.pid) / TICK + own
                rss = self.watcher.rss.pop(proc.pid) * PAGE / 1e6
            out.samples.append(Sample(kind, n, end - spawned, cpu, rss,
                                      first - spawned if first is not None else None, verdict))
        return out


def measure(bench: Bench, kinds: list[str], ns: list[int], budget: float) -> tuple[list[Batch], dict[str, float]]:
    """Every kind's batches, each kind given an even share of what is left of the budget
    (its first run and N=1 always run, so a busy machine can overrun it)."""
    batches: list[Batch] = []
    first_runs: dict[str, float] = {}
    deadline = time.monotonic() + budget
    for k, kind in enumerate(kinds):
        own_deadline = time.monotonic() + (deadline - time.monotonic()) / (len(kinds) - k)
        warm = bench.batch(kind, 1)
        first_runs[kind] = warm.samples[0].wall
        print(f"\n== {kind} (first run {warm.samples[0].wall:.1f} s, {warm.samples[0].verdict}; "
              f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
        rates: dict[int, float] = {}
        last = 0.0
        for n in ns:
            # a saturated machine takes twice as long for twice the runs: skip a batch that cannot end in time
            if rates and time.monotonic() + 2 * last > own_deadline:
                print(f"  N={n}: skipped, not enough of the time budget left", flush=True)
                break
            b = bench.batch(kind, n)
            batches.append(b)
            last = b.wall
            failed = [s.verdict for s in b.samples if s.verdict != "completed"]
            print(f"  N={n}: {b.wall:.1f} s, {b.per_minute:.1f} runs/min, "
                  f"CPU {_med([s.cpu for s in b.samples]):.1f} s a run, load {b.load:.1f}"
                  + (f", not completed: {', '.join(failed)}" if failed else ""), flush=True)
            if b.completed:
                rates[n] = b.per_minute
            if len(rates) >= 2 and ceiling(rates)[1]:
                break
    return batches, first_runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--max-n", type=int, default=16, help="the most workers at once")
    ap.add_argument("--budget", type=float, default=480, help="seconds for all the batches")
    ap.add_argument("--quick", action="store_true", help="N = 1 and 2, a 150-second budget")
    a = ap.parse_args()
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"--kinds: no worker kind {', '.join(unknown)}; use {', '.join(KINDS)}")
    ns = [1, 2] if a.quick else [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= a.max_n]
    if os.nice(0) < 10:
        os.nice(10 - os.nice(0))  # the machine's other work first; the workers inherit it
    tmp = Path(tempfile.mkdtemp(prefix="pilothouse-bench-ceiling-"))
    cores = os.cpu_count() or 1
    print(f"pilothouse ceiling bench, scenario {SCENARIO}: load {os.getloadavg()[0]:.1f} on {cores} CPUs, "
          f"nice {os.nice(0)}", flush=True)
    bench = Bench(tmp)
    from pilothouse.providers.runners.npm import find_binary

    missing = [k for k in kinds if k != "builtin" and find_binary(k) is None]
    for k in missing:
        print(f"{k}: its CLI is not installed (pilothouse install runner {k}); left out")
    started = time.monotonic()
    try:
        batches, first_runs = measure(bench, [k for k in kinds if k not in missing], ns,
                                      150 if a.quick else a.budget)
    finally:
        bench.watcher.stop.set()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{table(batches, first_runs, cores)}\n")
    print(f"({time.monotonic() - started:.0f} s in all; load {os.getloadavg()[0]:.1f} on {cores} CPUs at the end; "
          "a load above the CPU count means other work shared the CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
