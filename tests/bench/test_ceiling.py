"""bench/ceiling.py: the ceiling it names, the table it prints, and whose processes a run's are."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def _ceiling() -> Any:
    spec = importlib.util.spec_from_file_location("bench_ceiling", ROOT / "bench" / "ceiling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


ceiling = _ceiling()


def _batch(kind: str, n: int, wall: float, runs: list[tuple[float, float, float, float | None, str]]) -> Any:
    b = ceiling.Batch(kind, n, wall, 3.5)
    b.samples = [ceiling.Sample(kind, n, *run) for run in runs]
    return b


def test_the_ceiling_is_the_n_before_doubling_stopped_adding_throughput() -> None:
    assert ceiling.ceiling({1: 10.0, 2: 19.0, 4: 21.0, 8: 20.0}) == (2, True)
    assert ceiling.ceiling({1: 10.0, 2: 11.0}) == (1, True)


def test_a_ceiling_still_rising_at_the_largest_n_says_so() -> None:
    assert ceiling.ceiling({1: 10.0, 2: 19.0, 4: 30.0}) == (4, False)
    assert ceiling.ceiling({1: 10.0}) == (1, False)


def test_the_table_gives_each_kind_its_medians_and_leaves_failed_runs_out_of_them() -> None:
    batches = [
        _batch("codex", 1, 10.0, [(10.0, 2.0, 300.0, 4.0, "completed")]),
        _batch("codex", 2, 12.0, [(11.0, 2.2, 320.0, 5.0, "completed"), (12.0, 2.4, 340.0, 6.0, "completed")]),
        # doubling again added nothing, and one run failed: it is counted as failed, not measured
        _batch("codex", 4, 24.0, [(20.0, 2.6, 360.0, 9.0, "completed"), (21.0, 2.8, 380.0, 9.0, "completed"),
                                  (22.0, 3.0, 400.0, 9.0, "completed"), (1.0, 99.0, 9999.0, None, "error")]),
    ]
    text = ceiling.table(batches, {"codex": 15.0}, cores=2)
    summary = [ln for ln in text.splitlines() if ln.startswith("| codex |")][0]
    cells = [c.strip() for c in summary.strip("|").split("|")]
    # first run, start-up and wall at N=1; CPU and memory over every completed run; runs/min at 1, 2, 4
    assert cells == ["codex", "15.0 s", "4.0 s", "10.0 s", "2.5 s", "350 MB", "6.0", "10.0", "7.5", "N=2", "48"]
    rows = [ln for ln in text.splitlines() if ln.startswith("| codex | 4 |")]
    assert rows == ["| codex | 4 | 24.0 s | 7.5 | 21.0 s | 2.8 s | 9.0 s | 1 | 3.5 on 2 |"]


def test_a_kind_measured_at_one_n_only_gets_no_ceiling() -> None:
    """One batch cannot show where throughput stops rising (the budget ran out on a busy machine)."""
    text = ceiling.table([_batch("opencode", 1, 5.0, [(5.0, 7.0, 600.0, 3.0, "completed")])], {}, cores=2)
    summary = [ln for ln in text.splitlines() if ln.startswith("| opencode |")][0]
    assert "not judged (only N=1 ran)" in summary and "N≥1" not in summary


def test_a_kind_with_no_completed_run_says_so_instead_of_a_ceiling() -> None:
    text = ceiling.table([_batch("opencode", 1, 5.0, [(5.0, 1.0, 100.0, None, "error")])], {}, cores=2)
    summary = [ln for ln in text.splitlines() if ln.startswith("| opencode |")][0]
    assert "no run completed" in summary


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_runs_processes_include_those_in_its_sandbox(tmp_path: Path) -> None:
    """A run's CPU and memory are its whole tree's: down through bubblewrap into the sandbox's own
    pid namespace, where the host sees the processes under other numbers."""
    marker = tmp_path / "sleep-here"
    marker.mkdir()
    launcher = ("import subprocess, sys; subprocess.Popen(['bwrap', '--unshare-user', '--unshare-pid', "
                "'--die-with-parent', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--chdir', "
                f"{str(marker)!r}, 'sleep', '60'], start_new_session=True).wait()")
    root = subprocess.Popen([sys.executable, "-c", launcher])
    try:
        found: list[int] = []
        for _ in range(300):  # until bubblewrap has started the sandbox
            procs = ceiling._procs()
            found = [p for p in ceiling.tree(root.pid, procs) if _cwd(p) == marker]
            if found:
                break
            time.sleep(0.1)
        assert found, "the sandboxed sleep was not among the run's processes"
        assert 1 not in ceiling.tree(root.pid, procs) and len(ceiling.tree(root.pid, procs)) < 10
    finally:
        root.kill()
        root.wait()


def _cwd(pid: int) -> Path | None:
    try:
        return Path(f"/proc/{pid}/cwd").resolve(strict=True)
    except OSError:
        return None
