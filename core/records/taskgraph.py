"""Task definitions (`.ai/tasks.yaml`, docs/tasks-yaml.md) and their graph.

Definitions come from the assigner's plan, a host agent or the operator (`task define`); all go
through `validate_tasks`, which reports every problem at once, each naming the task id, the
field and the fix, so a planner can correct its output in one round. Status never lives here
(state.db holds it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any, Literal

from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import COMPLEXITIES, ProjectConfig, parse_yaml
from pilothouse.providers.errors import UserError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

KINDS = ("SAFE_PARALLEL", "DEPENDENT", "HOTSPOT", "CONTRACT_CHANGE", "DECOUPLE", "TEST_ONLY", "RESEARCH")
Kind = Literal["SAFE_PARALLEL", "DEPENDENT", "HOTSPOT", "CONTRACT_CHANGE", "DECOUPLE", "TEST_ONLY", "RESEARCH"]
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
FILE = ".ai/tasks.yaml"
# task entries the file may hold, all jobs together: what a writer refuses before writing and the
# reader refuses on reading, so no writer leaves a file every reader then rejects
MAX_TASKS = 2000


def _q(value: object) -> str:
    """A name from the file, quoted for a one-line message: a newline or other control character
    in it is shown escaped, never printed."""
    text = str(value)
    return f"'{text}'" if text.isprintable() else repr(text)


class ExpectedPaths(BaseModel):
    model_config = ConfigDict(extra="forbid")
    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)


class TaskDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    job_id: str
    title: str
    description: str = ""
    kind: Kind = "SAFE_PARALLEL"
    role: str = "implementer"
    expected_paths: ExpectedPaths = Field(default_factory=ExpectedPaths)
    depends_on: list[str] = Field(default_factory=list)
    gate_level: str | None = None  # None: the full gate
    skills: list[str] = Field(default_factory=list)
    acceptance: list[str] = Field(default_factory=list)
    complexity: Literal["easy", "standard", "complex"] = "standard"
    model_assignment: str | None = None
    # why this task may delete, skip or relax tests or their settings (with those paths in
    # expected_paths.write): without it, such a change stops the task as gate_weakened
    test_change_reason: str = ""

    @field_validator("acceptance", "depends_on", "skills", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @property
    def writes(self) -> bool:
        return bool(self.expected_paths.write)

    def effective_gate(self) -> str:
        return self.gate_level or "full"

    def to_yaml_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=False)


class TaskGraphError(UserError):
    """Every problem found in a set of task definitions."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        head = errors[0] if len(errors) == 1 else f"{len(errors)} problems: " + "; ".join(errors)
        super().__init__(head)


_KNOWN = tuple(TaskDef.model_fields)


def _branch_problem(tid: str) -> str | None:
    """Why `tid` cannot end a branch name (ph/job/<job>/<tid>), or None.

    ID_RE already keeps out everything else git refuses (spaces, ':', '~', '^', '@{', a leading
    '.' or '-'); these are git check-ref-format's remaining rules, checked without a git process
    per task."""
    if ".." in tid:
        return "it contains '..'"
    if tid.endswith(".lock"):
        return "it ends with '.lock'"
    if tid.endswith("."):
        return "it ends with '.'"
    return None


def _path_problem(p: Any) -> str | None:
    if not isinstance(p, str) or not p.strip():
        return "an empty path"
    if p.startswith("/") or p.startswith("~") or re.match(r"^[A-Za-z]:[\\/]", p):
        return f"'{p}' is absolute: use a path relative to the repository root"
    if ".." in PurePosixPath(p.replace("\\", "/")).parts:
        return f"'{p}' leaves the repository ('..'): use a path inside it"
    return None


def _listed(value: Any) -> list[Any]:
    """A field that takes one string or a list of them, as a list; any other shape as [] (the
    model's validation reports that shape, naming the field)."""
    return [value] if isinstance(value, str) else value if isinstance(value, list) else []


def _entry_errors(entry: dict[str, Any], tid: str, project: ProjectConfig) -> tuple[list[str], TaskDef | None]:
    errors: list[str] = []
    where = f"task {_q(tid)}"
    for key in entry:
        if key not in _KNOWN:
            errors.append(f"{where}: unknown key '{key}': remove it (known keys: {', '.join(_KNOWN)})")
    kind = entry.get("kind")
    if kind is not None and kind not in KINDS:
        errors.append(f"{where}: kind: unknown kind {kind!r}: use one of {', '.join(KINDS)}")
    cx = entry.get("complexity")
    if cx is not None and cx not in COMPLEXITIES:
        errors.append(f"{where}: complexity: {cx!r} is not one of {', '.join(COMPLEXITIES)}")
    ep = entry.get("expected_paths")
    if isinstance(ep, dict):
        for side in ("read", "write"):
            vals = ep.get(side) or []
            for p in _listed(vals):
                problem = _path_problem(p)
                if problem:
                    errors.append(f"{where}: expected_paths.{side}: {problem}")
    for sk in _listed(entry.get("skills")):
        if isinstance(sk, str) and ("/" in sk or sk.endswith(".md")):
            problem = _path_problem(sk)
            if problem:
                errors.append(f"{where}: skills: {problem}")
    if errors:
        return errors, None
    clean = dict(entry)
    if isinstance(ep, dict):
        clean["expected_paths"] = {k: ([v] if isinstance(v, str) else v) for k, v in ep.items()}
    try:
        task = TaskDef.model_validate(clean)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(x) for x in err["loc"]) or "(entry)"
            msg = err["msg"].removeprefix("Value error, ")
            fix = "add it" if err["type"] == "missing" else "fix the value"
            errors.append(f"{where}: {field}: {msg}: {fix}")
        return errors, None
    if task.gate_level is not None and task.gate_level not in project.gates:
        errors.append(f"{where}: gate_level: gate {_q(task.gate_level)} is not defined in .ai/project.yaml "
                      f"(defined: {', '.join(sorted(project.gates))}): use one of those or define it")
    if task.kind == "RESEARCH" and task.writes:
        errors.append(f"{where}: expected_paths.write: a RESEARCH task never writes: remove its write paths "
                      "or give it another kind")
    if task.model_assignment is not None and task.model_assignment not in project.model_policy.assignments:
        known = ", ".join(sorted(project.model_policy.assignments)) or "none defined"
        errors.append(f"{where}: model_assignment: {_q(task.model_assignment)} is not in "
                      f"model_policy.assignments ({known}): use one of those or drop the field")
    if tid in task.depends_on:
        errors.append(f"{where}: depends_on: a task cannot depend on itself: remove {_q(tid)}")
    return errors, task


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as [a, b, …, a], or None. Depth-first with its own stack: a chain of
    thousands of tasks must not hit Python's recursion limit. (graphlib finds cycles too, but
    names them in its own order; this one names the first met, as the operator wrote the graph.)"""
    color: dict[str, int] = {}
    for root in graph:
        if root in color:
            continue
        path = [root]
        todo = [iter(graph.get(root, []))]
        color[root] = 1
        while todo:
            for dep in todo[-1]:
                if dep not in graph:
                    continue
                if color.get(dep) == 1:
                    return path[path.index(dep):] + [dep]
                if dep not in color:
                    color[dep] = 1
                    path.append(dep)
                    todo.append(iter(graph.get(dep, [])))
                    break
            else:
                color[path.pop()] = 2
                todo.pop()
    return None


def validate_tasks(entries: Sequence[Any], project: ProjectConfig, existing: Iterable[TaskDef] = (), *,
                   job: str | None = None) -> list[TaskDef]:
    """Validate new task definitions against each other, the project and existing tasks.

    `job` fills `job_id` where an entry leaves it out (and must match where it doesn't).
    Dependencies may name new tasks or existing tasks of the same job. Raises TaskGraphError.
    """
    errors: list[str] = []
    tasks: list[TaskDef] = []
    seen: set[tuple[str, str]] = set()
    broken: list[tuple[str, str, list[Any]]] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append(f"entry #{i + 1}: expected a mapping with id, title, kind, …: fix the entry")
            continue
        tid = entry.get("id")
        if not isinstance(tid, str) or not ID_RE.match(tid):
            errors.append(f"entry #{i + 1}: id: {tid!r} is not a valid id: use lowercase letters, digits, "
                          "'-', '_' or '.', starting with a letter or digit")
            continue
        if problem := _branch_problem(tid):
            errors.append(f"task {_q(tid)}: id cannot be part of a git branch name ({problem}; "
                          "no '..', no trailing '.', no '.lock'): rename it")
            continue
        entry = dict(entry)
        if job is not None:
            if entry.get("job_id") not in (None, job):
                errors.append(f"task {_q(tid)}: job_id: {_q(entry['job_id'])} but these tasks are for job "
                              f"'{job}': drop the field or use '{job}'")
                continue
            entry["job_id"] = job
        key = (str(entry.get("job_id")), tid)
        if key in seen:
            errors.append(f"task {_q(tid)}: id: defined twice: give each task its own id")
            continue
        seen.add(key)
        errs, task = _entry_errors(entry, tid, project)
        errors.extend(errs)
        if task is not None:
            tasks.append(task)
        else:
            # still check its dependencies, so one round of fixes is enough (only the names: a list
            # or mapping where a name belongs is already reported, and cannot be looked up)
            deps = [d for d in _listed(entry.get("depends_on")) if isinstance(d, str)]
            broken.append((key[0], tid, deps))
    new_keys = {(t.job_id, t.id) for t in tasks}
    kept = [t for t in existing if (t.job_id, t.id) not in new_keys]
    by_job: dict[str, set[str]] = {}
    for t in [*kept, *tasks]:
        by_job.setdefault(t.job_id, set()).add(t.id)
    for jid, tid, _ in broken:
        by_job.setdefault(jid, set()).add(tid)
    for jid, tid, deps in [*((t.job_id, t.id, t.depends_on) for t in tasks), *broken]:
        for dep in deps:
            if dep != tid and dep not in by_job.get(jid, set()):
                errors.append(f"task {_q(tid)}: depends_on: unknown task {_q(dep)} in job {_q(jid)}: define it "
                              "or remove the dependency")
    for jid in sorted({t.job_id for t in tasks}):
        graph = {t.id: list(t.depends_on) for t in [*kept, *tasks] if t.job_id == jid}
        cycle = find_cycle(graph)
        if cycle:
            errors.append(f"task {_q(cycle[0])}: depends_on: dependency cycle {' -> '.join(t if str(t).isprintable() else repr(t) for t in cycle)}: "
                          "break it by removing one of these dependencies")
    if errors:
        raise TaskGraphError(errors)
    return tasks


# ---------------------------------------------------------------- the file


def _read_entries(layout: RepoLayout) -> list[dict[str, Any]]:
    from pilothouse.core.records.layout import read_text

    try:
        text = read_text(layout.tasks_yaml, FILE)
    except FileNotFoundError:
        return []
    data = parse_yaml(text, FILE)
    if data is None:
        return []
    if isinstance(data, dict):
        data = data.get("tasks") or []
    if not isinstance(data, list):
        raise UserError(f"{FILE}: expected `tasks:` with a list of task entries: fix the file")
    if len(data) > MAX_TASKS:
        raise UserError(f"{FILE}: {len(data)} task entries, more than the limit of {MAX_TASKS}: split the work "
                        "into several jobs, or remove the entries of finished ones")
    return [e for e in data if isinstance(e, dict)]


def load_tasks(layout: RepoLayout, job: str | None = None) -> list[TaskDef]:
    """Saved definitions (of one job, or all), in file order."""
    out = []
    for i, entry in enumerate(_read_entries(layout)):
        if job is not None and entry.get("job_id") != job:
            continue
        try:
            out.append(TaskDef.model_validate(entry))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise UserError(f"{FILE}: task {_q(entry.get('id', f'#{i + 1}'))}: {field}: {err['msg']}: fix the "
                            "entry (or re-run `task define`)") from None
    return out


def save_tasks(layout: RepoLayout, tasks: Iterable[TaskDef], *, replace_job: str | None = None) -> None:
    """Merge definitions into .ai/tasks.yaml by (job, id); with `replace_job`, that job's other
    definitions are dropped (a re-plan replaces the job's graph)."""
    import fcntl

    import yaml
    from pilothouse.providers.fsutil import atomic_write_text

    new = list(tasks)
    # the lock lives under the ignored runtime dir: nothing but records may show up in `git status`
    lock_dir = layout.runtime / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "tasks.yaml.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        entries = _read_entries(layout)
        index = {(t.job_id, t.id): t for t in new}
        merged: list[dict[str, Any]] = []
        for e in entries:
            key = (e.get("job_id"), e.get("id"))
            if key in index:
                merged.append(index.pop(key).to_yaml_dict())  # type: ignore[arg-type]
            elif replace_job is None or e.get("job_id") != replace_job:
                merged.append(e)
        merged.extend(t.to_yaml_dict() for t in new if (t.job_id, t.id) in index)
        if len(merged) > MAX_TASKS:
            raise UserError(f"{FILE} would hold {len(merged)} task entries, more than the limit of {MAX_TASKS}: "
                            "define fewer tasks (split the work into several jobs); nothing was written")
        text = "# task definitions (no status here: see `pilothouse job status`)\n" + yaml.safe_dump(
            {"tasks": merged}, sort_keys=False, allow_unicode=True, width=100)
        from pilothouse.providers.userfile import MAX_BYTES

        try:  # the reader's own limits (size, nodes): what is written here, every reader reads
            if len(text.encode()) > MAX_BYTES:
                raise UserError(f"{len(text.encode())} bytes, more than {MAX_BYTES}")
            parse_yaml(text, FILE)
        except UserError as exc:
            raise UserError(f"the task definitions would make a file the reader refuses ({exc}): define fewer or "
                            "shorter tasks; nothing was written") from None
        atomic_write_text(layout.tasks_yaml, text)


def topo_order(tasks: Sequence[TaskDef]) -> list[TaskDef]:
    """Dependencies first; ties keep the given order. Deps outside `tasks` are ignored."""
    by_key = {(t.job_id, t.id): t for t in tasks}
    done: set[tuple[str, str]] = set()
    out: list[TaskDef] = []
    remaining = list(tasks)
    while remaining:
        progressed = False
        for t in list(remaining):
            deps = [(t.job_id, d) for d in t.depends_on if (t.job_id, d) in by_key]
            if all(d in done for d in deps):
                out.append(t)
                done.add((t.job_id, t.id))
                remaining.remove(t)
                progressed = True
        if not progressed:  # a cycle slipped past validation: keep going rather than hang
            out.extend(remaining)
            break
    return out


def dependents_of(tasks: Sequence[TaskDef], task_id: str, job: str | None = None) -> list[str]:
    """Ids of every task that depends on `task_id`, directly or not (same job), in topo order."""
    jobs = {t.job_id for t in tasks if t.id == task_id}
    if job is not None:
        jobs &= {job}
    found: set[tuple[str, str]] = set()
    frontier = [(j, task_id) for j in jobs]
    while frontier:
        jid, tid = frontier.pop()
        for t in tasks:
            if t.job_id == jid and tid in t.depends_on and (jid, t.id) not in found:
                found.add((jid, t.id))
                frontier.append((jid, t.id))
    return [t.id for t in topo_order(list(tasks)) if (t.job_id, t.id) in found]
