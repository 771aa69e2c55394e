"""`pilothouse demo`: the whole main job on the simulator, in a scratch repository.

A small Python library with passing tests (data/demo/repo.yaml) becomes a git repository; `init`
sets it up with real gates (its test suite); a job is created from the bundled request; the
supervisor runs every role on the `sim` provider, scripted by a bundled scenario. The `demo`
scenario plans four tasks (three independent, one depending on all three), writes real code that
makes real tests pass, sends one task back once from review (`workflow.review: ai`, so the
finding round shows per task), merges everything and accepts the job.

A scenario may come with project overrides in data/demo/projects/<scenario>.yaml (merged into
.ai/project.yaml: e.g. another review mode, a token budget, a different gate).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from pilothouse.core.git.worktrees import GitError, git, git_ok
from pilothouse.core.records.layout import RepoLayout
from pilothouse.providers.errors import UserError

JOB = "demo"
DEFAULT_SCENARIO = "demo"


def _data() -> Path:
    from pilothouse.providers.paths import package_data

    return package_data()


def list_scenarios(runnable_only: bool = True) -> list[tuple[str, str]]:
    """(name, description) of the bundled scenarios; by default only those that can run a demo job
    (the others script single dispatches: `pilothouse sim list` shows them all)."""
    import yaml

    out = []
    for path in sorted((_data() / "scenarios").glob("*.yaml")):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            continue
        if not isinstance(doc, dict) or (runnable_only and not _plans(doc)):
            continue
        out.append((str(doc.get("name") or path.stem), str(doc.get("description") or "").strip()))
    return out


def _plans(doc: Any) -> bool:
    """The scenario scripts the assigner (a script matching mode plan): without one, the job's
    planning gets no answer and the demo could never get past it."""
    scripts = doc.get("scripts") if isinstance(doc, dict) else None
    for script in scripts if isinstance(scripts, list) else []:
        match = script.get("match") if isinstance(script, dict) else None
        mode = match.get("mode") if isinstance(match, dict) else None
        if mode == "plan" or (isinstance(mode, list) and "plan" in mode):
            return True
    return False


def scenario_exists(name: str) -> bool:
    return _scenario_path(name) is not None


def _scenario_path(name: str) -> Path | None:
    bundled = _data() / "scenarios" / f"{name}.yaml"
    if bundled.is_file():
        return bundled
    return Path(name) if Path(name).is_file() else None


def check_scenario(name: str) -> None:
    """Refuse, before anything is made, a scenario that is missing or cannot run a job."""
    import yaml

    path = _scenario_path(name)
    if path is None:
        names = ", ".join(n for n, _ in list_scenarios())
        raise UserError(f"no scenario named {name!r}: pick one of {names} (pilothouse demo --list)")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise UserError(f"scenario {name}: cannot read {path} ({type(exc).__name__}): fix the file") from None
    if not _plans(doc):
        raise UserError(f"scenario {name!r} scripts single dispatches, not a job (no script matches mode plan): "
                        "pick one from pilothouse demo --list, or try it with pilothouse dispatch --provider sim")


def check_dest(dest: Path) -> None:
    dest = dest.expanduser()
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--dir {dest}: not a directory: pass an empty or new directory")
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"{dest.resolve()} is not empty: pass an empty or new directory to --dir")


def test_command() -> str:
    """The demo's gate: its tests with this Python (pytest when installed, else unittest)."""
    py = shlex.quote(sys.executable)
    # -P: the working directory (wherever the operator stands) stays off the path, the user's
    # site-packages (where pytest may be) on it
    probe = subprocess.run([sys.executable, "-P", "-c", "import pytest"], capture_output=True)
    if probe.returncode == 0:
        # the scratch project needs no pytest plugins; loading the user's would only slow each gate
        return f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {py} -m pytest -q"
    return f"{py} -m unittest discover -s tests -t . -q"


def make_repo(dest: Path) -> Path:
    """The scratch project, committed on `main`."""
    import yaml

    dest = dest.resolve()
    check_dest(dest)
    manifest = yaml.safe_load((_data() / "demo" / "repo.yaml").read_text(encoding="utf-8"))
    for rel, content in manifest["files"].items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content or "", encoding="utf-8")
    git(dest, "init", "-q", "-b", "main")
    for key, value in (("user.name", "pilothouse demo"), ("user.email", "demo@pilothouse.invalid")):
        if not git_ok(dest, "config", key):
            git(dest, "config", key, value)  # only where the user has no identity of their own
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "textkit: normalize_space and its tests")
    return dest


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def configure(layout: RepoLayout, scenario: str, max_workers: int | None = None, *, unconfined: bool = False) -> None:
    """Point the project at the simulator and the scenario (plus the scenario's own overrides).
    `unconfined`: bubblewrap cannot work here; the scripted builders run without it."""
    import yaml
    from pilothouse.core.records.project import load_project
    from pilothouse.providers.fsutil import atomic_write_text

    data = yaml.safe_load(layout.project_yaml.read_text(encoding="utf-8"))
    data = _merge(data, {"workflow": {"review": "ai"}, "sim_scenario": scenario, "max_workers": max_workers or 3,
                         "model_policy": {"roles": {"coordinator": "sim", "reviewer": "sim"},
                                          "assignments": {"sim": {"provider": "sim"}}}})
    overrides = _data() / "demo" / "projects" / f"{Path(scenario).stem}.yaml"
    if overrides.is_file():
        data = _merge(data, yaml.safe_load(overrides.read_text(encoding="utf-8")) or {})
    if unconfined:
        data["confinement"] = "off"
    header = f"# pilothouse demo project: every role runs on the simulator (scenario {scenario})\n"
    atomic_write_text(layout.project_yaml, header + yaml.safe_dump(data, sort_keys=False))
    load_project(layout)


def unconfined_line() -> str | None:
    """The one line a demo prints when bubblewrap cannot work here (it then runs unconfined), or None."""
    from pilothouse.providers import confine

    reason = confine.unconfined_reason(None)
    if reason is None:
        return None
    return (f"running unconfined: {reason}. The demo's builders are scripted by the simulator; "
            "a real job refuses to start until bubblewrap works")


def prepare(dest: Path, scenario: str = DEFAULT_SCENARIO, max_workers: int | None = None, *,
            unconfined: bool = False) -> RepoLayout:
    """Scratch repo + init + the demo job; the supervisor is not started yet."""
    from pilothouse.core.records.jobs import create_job
    from pilothouse.core.repo_setup import init_project

    # `demo` checks the scenario before anything is made (check_scenario); tests and benches bring
    # their own, which may define the graph by hand and script no plan
    root = make_repo(dest)
    cmd = test_command()
    init_project(root, {"fast": cmd, "full": cmd}, stdin_is_tty=False)
    layout = RepoLayout(root)
    configure(layout, scenario, max_workers, unconfined=unconfined)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pilothouse init (demo: sim provider)")
    _holdout(layout, scenario)
    request = (_data() / "demo" / "request.md").read_text(encoding="utf-8")
    acceptance = (_data() / "demo" / "acceptance.md").read_text(encoding="utf-8")
    create_job(layout, JOB, request, acceptance)
    return layout


def _holdout(layout: RepoLayout, scenario: str) -> None:
    """The scenario's holdout tests (data/demo/holdout/<scenario>.yaml), written into gates.holdout
    in the checkout and left untracked, as an operator keeps them."""
    import yaml
    from pilothouse.core.records.project import load_project

    source = _data() / "demo" / "holdout" / f"{Path(scenario).stem}.yaml"
    folder = load_project(layout).holdout
    if not source.is_file() or not folder:
        return
    for name, content in yaml.safe_load(source.read_text(encoding="utf-8"))["files"].items():
        path = layout.root / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    exclude = layout.root / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as fh:
        fh.write(f"/{folder}/\n")


def integration_summary(layout: RepoLayout, job: str = "demo") -> list[str]:
    """One line per merge commit on the job's integration line (first parent), newest first."""
    from pilothouse.core.git.integration import job_line
    from pilothouse.core.records.project import load_project

    branch = job_line(load_project(layout), job)
    try:
        out = git(layout.root, "log", "--first-parent", "--merges", "--format=%h %s", branch)
    except GitError:
        return []
    return [line for line in out.splitlines() if line]


def tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM") not in (None, "dumb")
