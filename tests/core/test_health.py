"""A job that cannot go on for a reason the operator must fix is a problem at once, with the fix,
and goes on by itself once it is fixed (core/supervisor/health.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from pilothouse.core import demo
from pilothouse.core.git.integration import integration_path
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.stops import answering, problems
from pilothouse.core.supervisor import control as supervisor_ctl


def _quick(tmp_path: Path) -> RepoLayout:
    quick = tmp_path / "quick.yaml"
    bundled = Path(demo._data() / "scenarios" / "demo-recovery.yaml").read_text()
    quick.write_text(bundled.replace("delay_s: 3", "delay_s: 0"))
    layout = demo.prepare(tmp_path / "repo", str(quick))
    data = yaml.safe_load(layout.project_yaml.read_text())
    data["workflow"]["review"] = "off"
    data["gates"] = {"fast": "true", "full": "true"}
    layout.project_yaml.write_text(yaml.safe_dump(data))
    return layout


def test_no_coordinator_is_a_problem_saying_what_to_set_and_fixing_it_lets_the_job_go_on(tmp_path: Path,
                                                                                        cli) -> None:
    layout = _quick(tmp_path)
    configured = layout.project_yaml.read_text()
    data = yaml.safe_load(configured)
    del data["sim_scenario"]
    data["model_policy"] = {"roles": {}, "assignments": {}}  # what `pilothouse init` leaves
    layout.project_yaml.write_text(yaml.safe_dump(data))
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=60)
        assert w.returncode == 3, w.stdout + w.stderr
        assert "set model_policy.roles.coordinator in .ai/project.yaml" in w.stdout
        [p] = problems.list_problems(layout, True, job="demo")
        assert p.kind == "cannot_proceed" and p.task is None and "model_policy.roles.coordinator" in p.summary
        status = cli("job", "status", "demo", "--repo", str(layout.root))
        assert "blocked" in status.stdout and "model_policy.roles.coordinator" in status.stdout
        layout.project_yaml.write_text(configured)  # the fix alone is enough
        # the supervisor sees the file change and closes the problem; only then is the job moving
        # again (a `job wait` started before that would rightly still find it waiting)
        import threading

        from pilothouse.core.state.events import follow

        give_up = threading.Event()
        timer = threading.Timer(60, give_up.set)
        timer.start()
        closed = any(ev["type"] == "problem.closed" and (ev.get("data") or {}).get("code") == p.code
                     for ev in follow(layout.events, stop_event=give_up))
        timer.cancel()
        assert closed, "the fixed settings never closed the problem"
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)
    assert problems.list_problems(layout, True, job="demo") == []


def test_a_stale_integration_checkout_is_a_problem_naming_it(tmp_path: Path, cli) -> None:
    layout = _quick(tmp_path)
    stale = integration_path(layout, "demo")
    stale.mkdir(parents=True)
    (stale / ".git").write_text("gitdir: /gone/repo/.git/worktrees/_integration\n")  # an earlier repo's
    (stale / "left.txt").write_text("from before\n")
    supervisor_ctl.start(layout)
    try:
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=60)
        assert w.returncode == 3, w.stdout + w.stderr
        [p] = problems.list_problems(layout, True, job="demo")
        assert p.kind == "cannot_proceed" and str(stale) in p.summary and "remove it" in p.summary
        shutil.rmtree(stale)
        answering.act(layout, p.code, "retry")  # nothing under .ai changed: the reply wakes it
        w = cli("job", "wait", "demo", "--repo", str(layout.root), timeout=120)
        assert w.returncode == 0, w.stdout + w.stderr
    finally:
        supervisor_ctl.stop(layout)


def test_a_reader_never_sees_the_job_blocked_with_no_problem_open(tmp_path: Path, monkeypatch) -> None:
    """`job wait` takes a blocked job with no open problem as the operator's turn: while a
    cannot_proceed problem opens or closes, each moment in between must read as still going."""
    from pilothouse.core.commands.job_end import job_outcome
    from pilothouse.core.supervisor import health
    from pilothouse.core.supervisor.loop import Supervisor

    layout = _quick(tmp_path)
    sup = Supervisor(layout)
    sup.store.ensure_job("demo", 0)
    seen: list[tuple[str | None, str]] = []
    for name in ("open_problem", "close_problem"):
        real = getattr(problems, name)

        def spy(*args, _real=real, **kwargs):
            seen.append(job_outcome(layout, "demo"))
            out = _real(*args, **kwargs)
            seen.append(job_outcome(layout, "demo"))
            return out

        monkeypatch.setattr(problems, name, spy)
    try:
        health.stalled(sup, "demo", "the integration checkout is stale")
        assert job_outcome(layout, "demo")[0] == "waiting"
        health.cleared(sup, "demo")
    finally:
        sup.conn.close()
    assert len(seen) == 4 and all(outcome is None for outcome, _ in seen[:1] + seen[2:]), seen
