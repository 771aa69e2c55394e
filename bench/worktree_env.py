"""Worktree-ready time on an npm project with a large node_modules: the checkout's folder shared
(`sandbox.share: [node_modules]`) against `npm ci` in each worktree (a `setup:` command).

    python bench/worktree_env.py [--tasks 2] [--extra "typescript@5.4.5 ..."] [--skip-ci]

The project is call-bind 1.0.2 as published (tests/core/fixtures/thirdparty), its dev tools and the
pinned `--extra` packages installed by npm in the main checkout (about 150 MB of node_modules;
`--extra "... next@14.2.3"` makes it 370 MB). For each
task: a worktree made as the supervisor makes one, then what makes it ready to gate — nothing with
the shared folder, `npm ci` confined in the worktree without it — then the project's tests as the
gate, confined, to show the worktree really was ready. Goal (issue 13): ready in ≤ 1 s when shared.

Needs network access to the npm registry the first time (npm's cache is kept in
$PILOTHOUSE_BENCH_CACHE, else /var/tmp/pilothouse-test-cache/npm, for the main checkout's install;
each worktree's `npm ci` gets a fresh HOME, as a setup command does). Prints figures; asserts
nothing. Everything it makes is under one folder in /var/tmp, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "core" / "fixtures" / "thirdparty" / "call-bind-1.0.2"
EXTRA = "typescript@5.4.5 webpack@5.91.0 @babel/core@7.24.5 @swc/core@1.5.7"
GATE = "node_modules/.bin/tape 'test/*'"


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed in {cwd}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--tasks", type=int, default=2, help="worktrees per way")
    ap.add_argument("--extra", default=EXTRA, help="pinned npm packages added to the project's dev dependencies")
    ap.add_argument("--skip-ci", action="store_true", help="measure the shared folder only")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="ph-bench-env-", dir="/var/tmp"))
    home = base / "home"
    home.mkdir()
    os.environ.update(HOME=str(home), PILOTHOUSE_HOME=str(base / "pilothouse"), XDG_CONFIG_HOME=str(home / ".config"),
                      XDG_DATA_HOME=str(home / ".local/share"), XDG_STATE_HOME=str(home / ".local/state"),
                      XDG_CACHE_HOME=str(home / ".cache"))
    cache = Path(os.environ.get("PILOTHOUSE_BENCH_CACHE") or "/var/tmp/pilothouse-test-cache") / "npm"
    env = {**os.environ, "npm_config_cache": str(cache), "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.test",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.test"}
    try:
        return _bench(base, env, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _bench(base: Path, env: dict[str, str], args: argparse.Namespace) -> int:
    from pilothouse.core.git.gates import run_gate, run_setup
    from pilothouse.core.git.worktrees import create_worktree
    from pilothouse.core.records.layout import RepoLayout
    from pilothouse.core.records.project import ProjectConfig

    repo = base / "call-bind"
    shutil.copytree(FIXTURE, repo)
    _run(["git", "init", "-q", "-b", "main"], repo, env)
    npm = ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"]
    t0 = time.monotonic()
    _run([*npm, "--save-dev", *args.extra.split()], repo, env)  # writes package-lock.json for `npm ci`
    installed = time.monotonic() - t0
    (repo / ".gitignore").write_text("node_modules/\n.ai/runtime/\n")
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "call-bind 1.0.2 with a lockfile"], repo, env)
    size = _size(repo / "node_modules")
    packages = sum(1 for _ in (repo / "node_modules").rglob("package.json"))
    print(f"project: call-bind 1.0.2 + {args.extra}")
    print(f"main checkout's node_modules: {size / 1e6:.0f} MB, {packages} package.json files "
          f"(npm install there: {installed:.1f} s)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    layout = RepoLayout(repo)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    ways = [("shared node_modules", ProjectConfig.model_validate(
        {"gates": {"fast": GATE, "full": GATE}, "sandbox": {"share": ["node_modules"]}}))]
    if not args.skip_ci:
        ways.append(("npm ci per worktree", ProjectConfig.model_validate(
            {"gates": {"fast": GATE, "full": GATE},
             "setup": ["npm ci --ignore-scripts --no-audit --no-fund --prefer-offline"]})))
    for name, project in ways:
        for i in range(args.tasks):
            t0 = time.monotonic()
            wt, _branch = create_worktree(layout, f"bench-{name.split()[0]}", f"t{i}", head)
            made = time.monotonic() - t0
            failed = run_setup(project, wt) if project.setup else None
            ready = time.monotonic() - t0
            if failed is not None:
                print(f"{name}, task {i}: setup failed: {failed.reason}\n{failed.output_tail[-1500:]}")
                break
            gate = run_gate(project, "fast", wt)
            print(f"{name}, task {i}: worktree {made:.2f} s, ready to gate {ready:.2f} s; gate "
                  f"{'passed' if gate.passed else 'FAILED: ' + str(gate.reason)} in {gate.duration_s:.2f} s "
                  f"[ran {gate.toolchain}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
