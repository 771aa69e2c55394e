"""Token economy: one request as a managed job and as one solo dispatch, on the same real local model.

    python bench/token_economy.py [--server DIR] [--timeout S]

--server   the model server's folder (default: what `scripts/install-model-server --where` prints;
           build it first with `scripts/install-model-server`)
--timeout  how long the managed job may run, in seconds (default 1200)

It starts llama.cpp's server (llama-cpp-python, SmolLM2-135M-Instruct, one thread) on a free loopback
port, writes a provider for it in a throwaway PILOTHOUSE_HOME, makes a small git repository and
sends the same request twice:
- managed: `job create` + `job start` with every role on that model (coordinator, builder,
  reviewer), then `job wait`; its tokens by role from `pilothouse usage JOB --json`;
- solo: one `dispatch --mode code` with the request as its task.
It prints each total with its label (measured / estimated / unknown), the managed job's split by
role and how it ended, and the ratio managed / solo. A model this small rarely follows the
protocol, so the job usually stops at a problem: the ratio then says what the overhead of the
managed path cost before it stopped, which is the figure docs/scaling.md records. No capability
probe is run first, so no role is refused before it is tried.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ALIAS = "smollm2-135m-instruct"
REQUEST = ("Add a function sub(a, b) to src/calc.py that returns a - b, with a test in "
           "tests/test_calc.py.\n")


def _server_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    out = subprocess.run([str(HERE / "scripts" / "install-model-server"), "--where"], capture_output=True,
                         text=True, check=True)
    return Path(out.stdout.strip())


def _gguf(server: Path) -> Path:
    stamp = server / ".installed"
    if not stamp.exists():
        raise SystemExit(f"no finished model server in {server}: run scripts/install-model-server first")
    for line in stamp.read_text().splitlines():
        if line.startswith("gguf="):
            return Path(line[5:])
    raise SystemExit(f"{stamp} names no gguf= model file: run scripts/install-model-server again")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(server: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    argv = [str(server / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(_gguf(server)),
            "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
            "--seed", "7", "--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "False"]
    log = (work / "llama-server.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=work, start_new_session=True,
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)})
    url = f"http://127.0.0.1:{port}/v1"
    while True:  # ready when it answers its model list; it says why when it dies first
        if proc.poll() is not None:
            raise SystemExit(f"the model server exited with {proc.returncode}: see {work / 'llama-server.log'}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=5):
                return proc, url
        except OSError:
            time.sleep(0.5)


def _cli(env: dict[str, str], cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pilothouse", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent.parent / 'src'))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.email=bench@localhost", "-c", "user.name=bench", "commit", "-qm", "start"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "Help", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {}))
    ap.add_argument("--server", help="the model server's folder (None: the one scripts/install-model-server --where names)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds the managed job may run")
    args = ap.parse_args()
    server = _server_dir(args.server)
    work = Path(tempfile.mkdtemp(prefix="ph-economy-"))
    home = work / "home"
    env = {**os.environ, "HOME": str(home), "PILOTHOUSE_HOME": str(home / "ph"),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_STATE_HOME": str(home / ".local/state"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local/share")}
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@localhost\n")
    proc, url = _start(server, work)
    try:
        providers = home / "ph" / "config" / "providers"
        providers.mkdir(parents=True)
        (providers / "local.yaml").write_text(
            f"key: local\nprovider_id: llama-cpp\nmodel_id: {ALIAS}\nbase_url: {url}\n"
            "display_name: SmolLM2 135M on llama.cpp's server (bench)\nrunner: builtin\n"
            "context_tokens: 2048\noutput_tokens: 256\nneeds_key: false\ncost: {input: 0, output: 0}\n")
        repo = _repo(work)
        request = work / "request.md"
        request.write_text(REQUEST)

        solo_dir = work / "solo"
        subprocess.run(["git", "clone", "-q", str(repo), str(solo_dir)], check=True)
        r = _cli(env, solo_dir, "dispatch", "--provider", "local", "--mode", "code", "--workdir", str(solo_dir),
                 "--task-file", str(request), "--in-place", "--timeout", "600")
        if r.returncode != 0 and "--in-place" in r.stderr:  # a build without the flag
            r = _cli(env, solo_dir, "dispatch", "--provider", "local", "--mode", "code", "--workdir",
                     str(solo_dir), "--task-file", str(request), "--timeout", "600")
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
        if not lines or lines[-1].get("type") != "pilothouse.verdict":
            raise SystemExit(f"the solo dispatch printed no verdict: {r.stderr[-400:]}")
        solo = lines[-1]
        solo_tokens = sum(int(solo["tokens"].get(k) or 0) for k in ("input", "output", "reasoning",
                                                                    "cache_read")) if solo.get("tokens") else 0

        for step in (["init", "--gate-fast", "python -m pytest -q"],
                     ["job", "create", "econ", "--request-file", str(request)]):
            done = _cli(env, repo, *step)
            if done.returncode != 0:
                raise SystemExit(f"pilothouse {' '.join(step)} failed: {done.stderr.strip()[-400:]}")
        project = repo / ".ai" / "project.yaml"
        import yaml

        data = yaml.safe_load(project.read_text())
        data["model_policy"] = {"roles": {"coordinator": "local", "reviewer": "local"},
                                "assignments": {"local": {"provider": "local"}}, "default_assignment": "local"}
        data["gates"] = {"fast": "python -m pytest -q", "full": "python -m pytest -q"}
        project.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.monotonic()
        _cli(env, repo, "job", "start", "econ")
        waited = _cli(env, repo, "job", "wait", "econ", "--timeout", str(int(args.timeout)),
                      timeout=args.timeout + 120)
        took = time.monotonic() - started
        _cli(env, repo, "job", "stop", timeout=120)
        status = json.loads(_cli(env, repo, "job", "status", "econ", "--json").stdout or "{}")
        usage = json.loads(_cli(env, repo, "usage", "econ", "--json").stdout or "{}")
        stops = json.loads(_cli(env, repo, "problem", "list", "--json").stdout or "[]")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    managed = int(usage.get("tokens") or 0)
    state = status.get("state") if isinstance(status, dict) else None
    print(f"model: {ALIAS} on llama.cpp's server ({url}), one thread")
    print(f"solo dispatch:  {solo_tokens} tokens ({solo.get('usage')}), verdict {solo.get('verdict')}, "
          f"{solo.get('steps')} turns, {solo.get('duration_s')} s")
    print(f"managed job:    {managed} tokens, job {state or waited.returncode} after {took:.0f} s "
          f"(job wait exit {waited.returncode})")
    for row in usage.get("rows") or []:
        print(f"  {row['role']:<10} {row['runs']:>3} runs  {row['tokens']:>7} tokens  {row['share'] * 100:5.1f}%  "
              f"({row['usage']})")
    for p in stops if isinstance(stops, list) else []:
        print(f"  stopped: {p.get('kind')}: {str(p.get('summary'))[:300]}")
    if managed and solo_tokens:
        print(f"ratio managed / solo: {managed / solo_tokens:.2f}")
    else:
        print("ratio: not measured (" + ("the managed job spent no tokens before it stopped" if solo_tokens
                                         else "the solo run counted 0") + ")")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
