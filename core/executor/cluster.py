"""Dispatches on a Ray cluster (`executor: ray` in .ai/project.yaml; docs/executors.md).

A run is a detached, named actor (node.py) in a namespace of its own per repository, so a
supervisor started again finds the runs still going (`ray.get_actor`) and collects those that
ended while none watched: an actor keeps its outcome until it is collected, then is killed. One
thread per run drives it: push the base to the hub, place the actor, seal the run's key to the
actor's public key, start it, then wait for the run's end; it lands the outcome (landing.py) and
wakes the supervisor's Waker. The waits are Ray's, cut in slices only to see whether the head was
started again meanwhile (connection.py), which no Ray call tells a driver.

Per run, `.ai/runtime/runs/<run>.cluster.json` records the base pushed and, once placed, the
node; it tells a restarted supervisor that the run was started (an actor gone then is a run lost,
never a run to start again).
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from pilothouse.core.dispatch import runs
from pilothouse.core.dispatch.runs import Launch
from pilothouse.core.executor import connection, hub
from pilothouse.core.executor.connection import HeadRestarted, connect
from pilothouse.core.executor.placement import PLACE_NOTICE_S, Placement, SandboxGone, sandbox_gone
from pilothouse.core.executor.run_record import (
    actor_name,
    named_actors,
    namespace_of,
    read_record,
    run_actor,
    write_record,
)
from pilothouse.core.executor.spares import Spares, actor_options
from pilothouse.core.records.layout import RepoLayout

if TYPE_CHECKING:
    import sqlite3

    from pilothouse.core.executor.host import Host

LOG_WAIT_S = 10.0  # how long one ask for a cluster run's new log lines waits on the node


def supervisor_trees(layout: RepoLayout) -> list[str]:
    """What a node sharing this machine's filesystem must hide from its runs as a run here hides it:
    the operator's checkout (untracked `.env`, holdout tests, other tasks' worktrees), this user's
    home and pilothouse's dirs (keys, logs). A node hides its own besides."""
    from pathlib import Path

    from pilothouse.providers import paths

    trees = [layout.root, Path.home(), paths.config_dir(), paths.data_dir(), paths.state_dir(), paths.cache_dir(),
             paths.secrets_dir()]
    return [str(p.resolve()) for p in trees]


class RayExecutor:
    name = "ray"

    def __init__(self, layout: RepoLayout) -> None:
        self.layout = layout
        self.namespace = namespace_of(layout)
        self._watching: set[str] = set()
        self.placement = Placement()
        self.spares = Spares(self.namespace)
        self._joined: dict[str, tuple[str, bytes | None]] = {}  # run id -> (ray.address, the cluster it started on)

    def live(self) -> set[str]:
        return set(self._watching)

    def warm(self, sup: Host) -> None:
        """Join the cluster and make the spare actors as the supervisor starts, beside its first
        passes: a fresh supervisor's first cluster run waited for both (`import ray`, the driver's
        connection, the actor's making: two seconds and more). Said in supervisor.log when it cannot."""
        def join() -> None:
            from pilothouse.core.executor.host import settings

            try:
                project = settings(sup)
                address = str(project.ray.address)
                ray = connect(address, self.namespace)
                self._fill(ray, project, connection.joined(address))
            except Exception as exc:  # noqa: BLE001 - the first run joins then, and says why it cannot
                sup.log.info("cluster not joined ahead of the runs: %s", exc)

        threading.Thread(target=join, name="ray-warm", daemon=True).start()

    def close(self) -> None:
        """The supervisor stops: its unclaimed spares go (a kill on a cluster whose head is gone may
        never return: waited for a few seconds only)."""
        import sys

        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return
        closing = threading.Thread(target=self.spares.close, args=(ray,), name="ray-close", daemon=True)
        closing.start()
        closing.join(timeout=5)

    def _fill(self, ray: Any, project: Any, since: bytes | None) -> None:
        self.spares.fill(ray, dict(project.ray.resources), since, lambda: named_actors(self.layout), project.ray.spares)

    def launch(self, sup: Host, launch: Launch, event_extra: dict[str, Any] | None = None) -> None:
        from pilothouse.core.executor.local import started

        self._watching.add(launch.run_id)
        started(sup, launch, {"namespace": self.namespace, **(event_extra or {})})
        sup.log.info("launched %s %s run %s on the cluster", launch.role, launch.task or launch.job, launch.run_id)
        self._drive(sup, launch)

    def adopt(self, sup: Host, row: sqlite3.Row, launch: Launch | None) -> bool:
        if launch is None or runs.read_verdict(self.layout, row["run_id"], row["provider"]) is not None:
            return False  # landed before the last supervisor went: recover() finishes it
        self._watching.add(launch.run_id)
        sup.tails[launch.run_id] = runs.RunTail(runs.provider_logs(launch.provider, launch.run_id)["jsonl"])
        sup.log.info("adopted run %s on the cluster", launch.run_id)
        self._drive(sup, launch)
        return True

    def collect(self, sup: Host, run_id: str, provider: str) -> dict[str, Any] | None:
        return runs.read_verdict(sup.layout, run_id, provider)

    def forget(self, sup: Host, run_id: str) -> None:
        self._watching.discard(run_id)

    def cancel(self, layout: RepoLayout, run_id: str, grace: float) -> bool:
        from pilothouse.core.records.project import load_project

        try:
            ray = connect(str(load_project(layout).ray.address), self.namespace)
            actor = ray.get_actor(run_actor(read_record(self.layout, run_id), run_id), namespace=self.namespace)
        except (ValueError, HeadRestarted):
            return False  # gone already (with its node, or with the cluster of a head started again)
        if "node_id" not in (read_record(self.layout, run_id) or {}):
            # never placed, so never started (its start follows the record of its node): an actor
            # still waiting for a node would not answer a cancel before it is placed
            ray.kill(actor)
            self._drop_refs(run_id)
            return True
        try:
            ray.get(actor.cancel.remote(grace), timeout=grace + 75)  # the kill, then the run thread (node.py)
        finally:
            ray.kill(actor)
            self._drop_refs(run_id)
        return True

    def _drop_refs(self, run_id: str) -> None:
        # a run over without landing leaves its base (and any result) on the hub for no one: a
        # crashed or cancelled run's refs used to stay there for good
        record = read_record(self.layout, run_id)
        if record is not None and record.get("hub"):
            hub.drop_refs(self.layout, str(record["hub"]), run_id)

    # --- one run ---------------------------------------------------------------------------------
    def _drive(self, sup: Host, launch: Launch) -> None:
        threading.Thread(target=self._follow, args=(sup, launch), name=f"ray-{launch.run_id}", daemon=True).start()

    def _follow(self, sup: Host, launch: Launch) -> None:
        from pilothouse.providers.errors import describe

        try:
            self._run(sup, launch)
        except Exception as exc:  # noqa: BLE001 - the run ends without a verdict, and says why
            restarted = self._restarted_at(launch)
            why = (str(exc) if isinstance(exc, (SandboxGone, HeadRestarted)) else
                   connection.restart_line(restarted, launch.run_id) if restarted else
                   self._node_lost(launch.run_id, exc) or describe(exc))
            sup.log.warning("cluster run %s: %s", launch.run_id, why)
            if restarted:  # this process is joined to the old cluster, whose calls never end
                sup.start_again(connection.rejoin_line(restarted))
            line = f"pilothouse: the cluster run failed: {why}\n".encode()
            with open(runs.run_files(self.layout, launch.run_id)["err"], "a+b") as err:
                err.seek(max(0, err.seek(0, os.SEEK_END) - len(line)))
                # said already by the supervisor before this one, which started again before it collected the run
                if err.read() != line:
                    err.write(line)
            self._drop_refs(launch.run_id)
        finally:
            self._watching.discard(launch.run_id)
            sup.waker.ended(launch.run_id)

    def _run(self, sup: Host, launch: Launch) -> None:
        from pilothouse.core.executor.host import settings
        from pilothouse.core.executor.local import worker_nice
        from pilothouse.core.executor.node import RunActor
        from pilothouse.core.git.checkout import head

        project = settings(sup)
        address = str(project.ray.address)
        ray = connect(address, self.namespace)
        since = connection.joined(address)
        self._joined[launch.run_id] = (address, since)

        def get(ref: Any, limit: float | None = None) -> Any:
            return connection.get(ray, ref, address, since, launch.run_id, limit)
        record = read_record(self.layout, launch.run_id)
        name = actor_name(launch.run_id)
        if record is None:  # a new run (or one recorded by a supervisor that died before this step)
            url = hub.hub_url(self.layout, project)
            record = {"hub": url, "base": head(launch.workdir)}
            hub.publish_base(self.layout, url, record["base"], launch.run_id)
            write_record(self.layout, launch.run_id, record)
        where: dict[str, Any] = {}
        avoid: list[str] = []
        pinned: str | None = None
        spare = None
        if "node_id" in record:  # placed, so maybe started: only that actor may carry on
            elsewhere = connection.placed_on(record, address, launch.run_id)
            if elsewhere:  # placed on a cluster whose head was started again since
                raise HeadRestarted(elsewhere)
            try:
                actor = ray.get_actor(run_actor(record, launch.run_id), namespace=self.namespace)
            except ValueError:
                raise RuntimeError("its actor is gone from the cluster (its node stopped, or it was killed)") from None
        else:  # never placed, so never started: making it (again, by name) is its one start
            if launch.mode == "resume" and launch.resume_of:
                # its session's sandbox is on one node alone (placement.py); SandboxGone when none has it
                pinned = self.placement.sandbox_node(ray, launch, read_record(self.layout, launch.resume_of))
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                where["scheduling_strategy"] = NodeAffinitySchedulingStrategy(pinned, soft=False)
                sup.log.info("cluster run %s resumes run %s on node %s, which holds its sandbox",
                             launch.run_id, launch.resume_of, pinned[:12])
            else:
                avoid = self.placement.keep_off(ray)
                self.spares.sweep(ray, lambda: named_actors(self.layout))
                spare = self.spares.take(ray, dict(project.ray.resources), since, set(avoid), PLACE_NOTICE_S)
            if avoid:
                where["label_selector"] = {"ray.io/node-id": f"!in({', '.join(avoid)})"}
                sup.log.info("cluster run %s keeps off node(s) %s, where a run was lost lately",
                             launch.run_id, ", ".join(n[:12] for n in avoid))
            if spare is not None:
                actor, name = spare.actor, spare.name
            else:
                self.spares.making_own(ray)  # until spares.placed() below
                try:
                    actor = ray.remote(RunActor).options(**actor_options(
                        self.namespace, name, dict(project.ray.resources), **where)).remote(self.namespace, launch.run_id)
                except BaseException:
                    self.spares.placed()
                    raise
        own = spare is None and "node_id" not in record  # its own actor, waiting for a place
        gone = False
        try:
            try:
                # a spare is placed and made already: claiming it names the run it is for
                said_hello = actor.claim.remote(launch.run_id) if spare is not None else actor.hello.remote()
                if own:
                    self.placement.say_while_unplaced(sup, launch, ray, said_hello, dict(project.ray.resources),
                                                      set(avoid), pinned)
                hello = get(said_hello)
            except ray.exceptions.RayError as exc:
                if pinned is not None and "node_id" not in record:  # its node died while it waited for a place there
                    raise sandbox_gone(launch, read_record(self.layout, str(launch.resume_of))) from exc
                raise
            finally:
                if own:
                    self.spares.placed()
            if own:
                self._fill(ray, project, since)  # made again now that this run has its place
            if "node_id" not in record:
                record.update(node_id=str(hello["node_id"]), hostname=str(hello["hostname"]), root=str(hello["root"]),
                              cluster_id=since.hex() if since else None, actor=name)
                write_record(self.layout, launch.run_id, record)
                sup.events.append("run.placed", job=launch.job, task=launch.task, run=launch.run_id,
                                  data={"node_id": record["node_id"], "hostname": record["hostname"],
                                        "workdir": record["root"], "actor": name, "spare": spare is not None})
            if not hello["started"]:
                args = self.start_args(launch, record, bytes(hello["public_key"]), worker_nice(sup))
                get(actor.start.remote(*args))
            outcome_ref = actor.outcome.remote()
            streamed = self._follow_log(launch, actor, get)
            outcome = get(outcome_ref)
            self._land(sup, launch, record, outcome if isinstance(outcome, dict) else {}, streamed=streamed)
        except HeadRestarted:
            gone = True  # its actor went with the old cluster, and the old driver's kill may never end
            raise
        finally:
            # its outcome is landed (or never will be, as when its start was refused): a detached actor
            # left behind would hold its node's resources for good
            if not gone:
                ray.kill(actor)
                if spare is not None:
                    # made again now rather than beside the run: making one takes a node's CPU a second
                    try:
                        self._fill(ray, project, since)
                    except Exception as exc:  # noqa: BLE001 - only a spare: the next run makes its own
                        sup.log.info("no spare actor made after run %s: %s", launch.run_id, exc)

    def _follow_log(self, launch: Launch, actor: Any, get: Any) -> bool:
        """The run's event lines as the node's dispatch writes them, into this machine's log of the
        run (JSON objects only, redacted with this machine's keys), where the supervisor tails them
        as it tails a local run's. From the start each time: a supervisor that adopts the run tails it
        from the start too. False when the node stopped answering (the outcome's tail is landed then)."""
        from pilothouse.core.executor.landing import is_event
        from pilothouse.providers.redact import configured_redactor

        redact = configured_redactor().redact
        path = runs.provider_logs(launch.provider, launch.run_id)["jsonl"]
        path.parent.mkdir(parents=True, exist_ok=True)
        offset, partial = 0, b""
        with open(path, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            while True:
                try:
                    got = get(actor.log_since.remote(offset, LOG_WAIT_S), LOG_WAIT_S + 60)
                except HeadRestarted:
                    raise
                except Exception:  # noqa: BLE001 - the outcome says what went wrong; its log's tail is landed
                    return False
                data = bytes(got.get("data") or b"")
                offset += len(data)
                data, partial = partial + data, b""
                cut = data.rfind(b"\n") + 1
                data, partial = data[:cut], data[cut:]
                kept = [redact(line) for line in data.decode("utf-8", errors="replace").splitlines() if is_event(line)]
                if kept:
                    out.write("".join(f"{line}\n" for line in kept).encode())
                    out.flush()
                if got.get("done"):
                    return True

    def _restarted_at(self, launch: Launch) -> str | None:
        """ray.address, when the head the run started under was started again (the run ended by
        HeadRestarted, or in Ray's own words meanwhile) and this process is still joined to the old
        cluster; else None."""
        address, since = self._joined.pop(launch.run_id, ("", None))
        return address if since is not None and connection.restarted(address, since) else None

    def _node_lost(self, run_id: str, exc: Exception) -> str | None:
        return self.placement.node_lost(read_record(self.layout, run_id) or {}, exc)

    def start_args(self, launch: Launch, record: dict[str, Any], public_key: bytes, nice: int) -> tuple[Any, ...]:
        """What the actor's start is called with, all of which Ray serializes and may keep: the key
        only sealed to the actor's `public_key`."""
        from pilothouse.core.executor.seal import seal
        from pilothouse.providers import guard, keys

        key = keys.get_key(launch.provider)
        # the node's dispatch refuses such a task too, but only after the text crossed the cluster in
        # the clear, and it knows no key but its run's: refused here, before anything is sent
        guard.check_task(launch.task_text, [*keys.configured_secrets(), *([key] if key else [])],
                         source=f"the task text of run {launch.run_id}")
        sealed = seal(public_key, json.dumps({"key": key}).encode(), launch.run_id)
        from pilothouse.core.dispatch.prepare import _project_settings

        # sandbox.share names folders of this checkout, which a node does not have (docs/executors.md)
        settings = {k: v for k, v in _project_settings(self.layout.root).items() if k != "sandbox_share"}
        settings["hide"] = supervisor_trees(self.layout)
        spec = {**launch.__dict__, "scenario": launch.scenario and runs.scenario_path(self.layout, launch.scenario),
                "settings": settings}
        return spec, record["hub"], record["base"], sealed, nice

    def _land(self, sup: Host, launch: Launch, record: dict[str, Any], outcome: dict[str, Any], *,
              streamed: bool = False) -> None:
        """The run's work into its worktree, then its log and verdict (the verdict last: it is what
        tells the supervisor the run is done)."""
        from pilothouse.core.executor import landing
        from pilothouse.core.git.checkout import changed_files
        from pilothouse.providers.redact import configured_redactor

        redact = configured_redactor().redact
        changed: list[str] | None = None
        if launch.mode in ("code", "resume"):
            sha = hub.fetch_result(self.layout, record["hub"], launch.run_id) if outcome.get("pushed") else None
            if sha is not None:
                with sup.worktree_lock:
                    hub.apply_result(launch.workdir, record["base"], sha)
            changed = changed_files(launch.workdir, record["base"], uncommitted=True)
        if not streamed:
            landing.write_log(launch, str(outcome.get("log") or ""), redact)
        if outcome.get("error") or outcome.get("stderr"):
            with open(runs.run_files(self.layout, launch.run_id)["err"], "a") as err:
                err.write(redact(str(outcome.get("stderr") or ""))[-4000:])
                if outcome.get("error"):
                    err.write(f"\npilothouse: {redact(str(outcome['error']))[:2000]}\n")
        verdict = landing.vet_verdict(outcome.get("verdict"), launch, changed, redact)
        if verdict is not None:
            landing.write_verdict(launch, verdict)
        hub.drop_refs(self.layout, record["hub"], launch.run_id)
