"""What runs on a cluster node: one detached actor per run (core/executor/cluster.py starts it, or the
run claims a spare made ahead: spares.py).

The actor makes an X25519 keypair in memory and hands out the public half; the run's secrets
reach it sealed to that key (seal.py) and leave it only on a pipe to the dispatch, which reads its
key from there (core/dispatch/prepare.py: passed_key). The run gets its own checkout of its base
from the hub, under the node's pilothouse data dir, and runs the same `pilothouse dispatch` a
local launch runs, with the same confinement; then its work is committed and pushed back to the
hub. The actor outlives the supervisor that started it and keeps the run's outcome until a
supervisor collects it (then it is killed).

This module imports no Ray: Ray imports it on the node, by name, from the installed package.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pilothouse.core.dispatch import runs

LOG_LIMIT = 1 << 20  # the tail of the run's event log sent back with its outcome
LOG_CHUNK = 1 << 20  # the most of the run's event log one log_since call returns
_GIT_ID = ("-c", "user.name=pilothouse", "-c", "user.email=pilothouse@localhost", "-c", "core.hooksPath=/dev/null")


def node_root(namespace: str, run_id: str) -> Path:
    from pilothouse.providers.paths import data_dir

    return data_dir() / "nodes" / namespace / run_id


class RunActor:
    def __init__(self, namespace: str, run_id: str | None, unclaimed_ttl: float | None = None) -> None:
        """`run_id` None: a spare (spares.py), which a run takes by `claim`, and which ends its
        process when no run claimed it in `unclaimed_ttl` seconds."""
        from pilothouse.core.executor.seal import keypair

        self.namespace = namespace
        self.run_id: str | None = run_id
        self.root: Path | None = node_root(namespace, run_id) if run_id else None
        self._private, self._public = keypair()
        self._lock = threading.Lock()
        self._claimed = threading.Event()
        self._started = False
        self._done = threading.Event()
        self._outcome: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._cancelled = False
        self._log: Path | None = None  # the run's event log on this node, once it started
        if run_id is None and unclaimed_ttl is not None:
            threading.Thread(target=self._end_unclaimed, args=(unclaimed_ttl,), daemon=True).start()

    def _end_unclaimed(self, ttl: float) -> None:
        """A spare no run claimed in time ends its process: one whose supervisor died (killed, its
        machine gone) would hold the node's resources for good otherwise."""
        self._claimed.wait(ttl)
        with self._lock:
            if self.run_id is None:
                os._exit(0)

    def hello(self) -> dict[str, Any]:
        """Where the run is (for the supervisor's record) and the key to seal its secrets to."""
        import ray

        return {"public_key": self._public, "node_id": ray.get_runtime_context().get_node_id(),
                "hostname": socket.gethostname(), "root": str(self.root or ""), "started": self._started}

    def claim(self, run_id: str) -> dict[str, Any]:
        """A spare becomes run `run_id`'s actor, for good (its hello then); claiming it again for the
        same run is a no-op, for another run an error."""
        with self._lock:
            if self.run_id is None:
                self.run_id, self.root = run_id, node_root(self.namespace, run_id)
                self._claimed.set()
            elif self.run_id != run_id:
                raise RuntimeError(f"this actor is run {self.run_id}'s, not run {run_id}'s")
        return self.hello()

    def start(self, spec: dict[str, Any], hub: str, base: str, sealed: bytes, nice: int) -> bool:
        """Start the run once; False when it was already started (a supervisor adopting it)."""
        with self._lock:
            if self.run_id is None:
                raise RuntimeError("a spare actor starts no run before one claims it")
            if self._started:
                return False
            self._started = True
        self._log = runs.provider_logs(str(spec["provider"]), self.run_id)["jsonl"]
        threading.Thread(target=self._run, args=(spec, hub, base, sealed, nice), daemon=True).start()
        return True

    def outcome(self) -> dict[str, Any]:
        """Blocks until the run is over: its verdict, whether its work was pushed, its log's tail."""
        self._done.wait()
        return self._outcome

    def log_since(self, offset: int, wait: float) -> dict[str, Any]:
        """The run's event log from byte `offset` on, as soon as there is some (or the run is over, or
        `wait` seconds passed): the supervisor shows a cluster run's activity while it runs, as a
        local one's. `done`: the run is over and nothing is left past what this returns."""
        import time

        deadline = time.monotonic() + wait
        while True:
            done = self._done.is_set()  # before the read: what the run wrote before it ended is in it
            data = self._read_log(offset)
            if data or done or time.monotonic() >= deadline:
                return {"data": data, "done": done and len(data) < LOG_CHUNK}
            self._log_grew(deadline)

    def _read_log(self, offset: int) -> bytes:
        if self._log is None:
            return b""
        try:
            with open(self._log, "rb") as fh:
                fh.seek(offset)
                return fh.read(LOG_CHUNK)
        except OSError:
            return b""

    def _log_grew(self, deadline: float) -> None:
        """Until the run's log folder changes, the run ends, or the deadline (inotify, through watchfiles)."""
        import time

        left = deadline - time.monotonic()
        folder = self._log.parent if self._log is not None else None
        if left <= 0:
            return
        if folder is None or not folder.is_dir():  # the dispatch has not made it yet
            self._done.wait(min(left, 0.5))
            return
        from watchfiles import watch

        for _ in watch(folder, stop_event=self._done, rust_timeout=int(left * 1000) + 1, yield_on_timeout=True,
                       debounce=20, step=20):
            return

    def cancel(self, grace: float) -> bool:
        """Interrupt the dispatch (its whole process group), kill it after `grace` seconds; one not
        started yet (its checkout still being made) never starts."""
        with self._lock:
            self._cancelled = True
            proc, started = self._proc, self._started
        killed = False
        if proc is not None and proc.poll() is None:
            killed = True
            for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if started:
            # the host drops the run's refs from the hub once this returns: a push of the run's work
            # still under way would land after that and stay there for no one
            self._done.wait(timeout=60)
        return killed

    # --- the run ---------------------------------------------------------------------------------
    def _run(self, spec: dict[str, Any], hub: str, base: str, sealed: bytes, nice: int) -> None:
        from pilothouse.providers.errors import describe

        try:
            self._outcome = self._dispatch(spec, hub, base, sealed, nice)
        except Exception as exc:  # noqa: BLE001 - the supervisor hears why instead of a silent end
            self._outcome = {"error": f"the run failed on its node: {describe(exc)}"}
        finally:
            self._done.set()

    def _dispatch(self, spec: dict[str, Any], hub: str, base: str, sealed: bytes, nice: int) -> dict[str, Any]:
        from pilothouse.core.dispatch.prepare import KEY_FD_ENV, PARENT_ENV, SETTINGS_ENV
        from pilothouse.core.dispatch.priority import lower
        from pilothouse.core.executor.hub import base_ref, result_ref
        from pilothouse.core.executor.seal import open_sealed
        from pilothouse.core.git.worktrees import git
        from pilothouse.providers.hostpython import host_env

        root, run_id = self.root, self.run_id
        assert root is not None and run_id is not None  # start() refuses a spare no run claimed
        secrets = json.loads(open_sealed(self._private, sealed, run_id))
        self._private = None  # one run, one opening
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        checkout = root / "checkout"
        check_out(root.parent, hub, run_id, base, checkout)
        settings = spec.pop("settings", None)
        launch = runs.Launch(**{**spec, "workdir": str(checkout)})
        task_file = root / "task.md"
        task_file.write_text(launch.task_text)
        env = host_env()
        if isinstance(settings, dict):
            # the supervisor's settings, not the checkout's committed .ai/project.yaml: that copy lacks
            # what the operator has not committed (gates.protected, network: none, confinement)
            (root / "settings.json").write_text(json.dumps(settings))
            env[SETTINGS_ENV] = str(root / "settings.json")
        if launch.scenario:
            env["PILOTHOUSE_SIM_SCENARIO"] = launch.scenario
        env[PARENT_ENV] = str(os.getpid())  # killed with this actor, the dispatch ends too
        key = str(secrets.get("key") or "")
        del secrets
        pass_fds: tuple[int, ...] = ()
        if key:
            r, w = os.pipe()
            os.write(w, key.encode())  # far below a pipe's buffer: the write never blocks
            os.close(w)
            env[KEY_FD_ENV] = str(r)
            pass_fds = (r,)
        key = ""
        try:
            with open(root / "out", "ab") as out, open(root / "err", "ab") as err, self._lock:
                if self._cancelled:  # the actor is killed next, but a dispatch is a session of its own
                    raise RuntimeError("the run was cancelled before its dispatch started")
                self._proc = subprocess.Popen(runs.dispatch_argv(None, launch, task_file), stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=err, cwd=checkout, env=env, start_new_session=True,
                                              close_fds=True, pass_fds=pass_fds)
        finally:
            for fd in pass_fds:
                os.close(fd)
        lower(self._proc.pid, nice)
        self._proc.wait()
        lines = (root / "out").read_text(errors="replace").splitlines()
        verdict = runs.last_verdict(lines)
        logs = runs.provider_logs(launch.provider, run_id)
        if verdict is None:
            try:
                verdict = json.loads(logs["verdict"].read_text())
            except (OSError, ValueError):
                verdict = None
        pushed = False
        with self._lock:
            cancelled = self._cancelled
        if launch.mode in ("code", "resume") and not cancelled:  # a cancelled run's work is wanted by no one
            from pilothouse.core.git.checkout import stage_work
            from pilothouse.core.git.worktrees import git_ok

            stage_work(checkout)
            if not git_ok(checkout, "diff", "--cached", "--quiet"):
                git(checkout, *_GIT_ID, "commit", "-q", "--no-verify", "-m", f"run {run_id}")
            git(checkout, *_GIT_ID, "push", "-q", "--force", hub, f"HEAD:{result_ref(run_id)}")
            pushed = True
        # the work is in the hub (or there was none to keep): the checkout goes, the run's sandbox stays
        # on the node for a resumed run (core/dispatch/prepare.py finds it by run id)
        cache = root.parent / "cache.git"
        with _cache_lock(root.parent):
            git(cache, "worktree", "remove", "--force", str(checkout), check=False)
            git(cache, "update-ref", "-d", base_ref(run_id), check=False)
        return {"verdict": verdict, "pushed": pushed, "log": _tail(logs["jsonl"], LOG_LIMIT),
                "stderr": _tail(root / "err", 4000)}


def check_out(repo_dir: Path, hub: str, run_id: str, base: str, checkout: Path) -> None:
    """The run's base from the hub into `checkout`, a worktree of the node's store for the repository.

    The node keeps one object store per repository, so a run fetches only what is new since the
    last, and its checkout has the history a reviewer diffs against. The runs of a job start at once,
    each in an actor process of its own: they take turns at the store, whose making and ref and
    worktree updates take git's locks that fail rather than wait."""
    from pilothouse.core.executor.hub import base_ref, why
    from pilothouse.core.git.worktrees import GitError, git
    from pilothouse.providers.errors import UserError

    cache = repo_dir / "cache.git"
    ref = base_ref(run_id)
    with _cache_lock(repo_dir):
        if not (cache / "HEAD").exists():
            git(repo_dir, "init", "-q", "--bare", str(cache))
        try:
            git(cache, "fetch", "-q", "--no-tags", hub, f"+{ref}:{ref}")
        except GitError as exc:
            raise UserError(f"ray.hub in .ai/project.yaml: node {socket.gethostname()} cannot fetch from the hub "
                            f"{hub} ({why(exc)}); make the hub reachable from every node by that path or "
                            "URL") from None
        if git(cache, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}") != base:
            raise RuntimeError(f"the hub's base for this run is not {base[:12]}")
        if not (checkout / ".git").exists():
            git(cache, "worktree", "add", "-q", "--detach", str(checkout), base)


@contextmanager
def _cache_lock(repo_dir: Path) -> Iterator[None]:
    import fcntl

    repo_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(repo_dir / "cache.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield  # closing the file lets the lock go


def _tail(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
