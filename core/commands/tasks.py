"""CLI group 'tasks': define a job's task graph by hand (or from a host agent).

    pilothouse task define --file tasks.yaml [--job J] [--replace] [--json]
    pilothouse task list [--job J] [--json]
(the problems group adds `task retry`)
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms on every command; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

# far above any real graph (hundreds of tasks); only keeps a wrong file from being read whole
MAX_TASKS_FILE_CHARS = 2_000_000


def register(sub: Any) -> None:
    p = sub.add_parser("task", aliases=["tasks"], help="define and list task definitions",
                       description="Task definitions live in .ai/tasks.yaml (no status there). `task define` "
                                   "validates a file of entries (docs/tasks-yaml.md) and merges it by id.")
    task_sub = p.add_subparsers(dest="task_cmd", metavar="ACTION")
    d = task_sub.add_parser("define", help="validate tasks from a YAML file and save them into .ai/tasks.yaml")
    d.add_argument("--file", required=True, metavar="F",
                   help="YAML: a list of task entries, or {tasks: [...]} ('-': stdin)")
    d.add_argument("--job", help="the job the tasks belong to (fills job_id where an entry leaves it out)")
    d.add_argument("--replace", action="store_true",
                   help="replace the job's whole graph (drop its tasks not in the file)")
    d.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=_define)
    ls = task_sub.add_parser("list", help="saved task definitions, dependencies first")
    ls.add_argument("--job", help="only this job's tasks")
    ls.add_argument("--repo", metavar="PATH", help="the repository (default: the one containing the current dir)")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=_list)
    p.set_defaults(func=_list, job=None, repo=None, json=False)
    from pilothouse.core.commands import problems

    hook = getattr(problems, "register_task_subcommands", None)
    if hook is not None:
        hook(task_sub)


def _define(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json
    from pilothouse.core.records.layout import find_repo, read_text
    from pilothouse.core.records.project import load_project, parse_yaml
    from pilothouse.providers import guard
    from pilothouse.providers.errors import UserError

    layout = find_repo(args.repo)
    project = load_project(layout)
    try:
        text = read_text(args.file, f"--file {args.file}", MAX_TASKS_FILE_CHARS)
    except FileNotFoundError:
        raise UserError(f"--file {args.file}: no such file") from None
    # task titles and descriptions go to the models and into .ai/tasks.yaml
    guard.check_words(text, f"--file {args.file}")
    data = parse_yaml(text, args.file)
    entries = data.get("tasks") if isinstance(data, dict) else data
    tasks, job_ids = define_tasks(layout, project, entries, args.job, args.replace, args.file, "cli")
    if args.json:
        emit_json([t.model_dump(mode="json") for t in tasks])
    else:
        print(f"defined {len(tasks)} task(s) in .ai/tasks.yaml: {', '.join(t.id for t in tasks)}")
        if len(job_ids) == 1:
            print(f"next: pilothouse job plan-ready {next(iter(job_ids))}")
    return 0


def _list(args: Any) -> int:
    from pilothouse.core.commands._out import emit_json, print_table
    from pilothouse.core.records.layout import find_repo
    from pilothouse.core.records.taskgraph import load_tasks, topo_order

    tasks = topo_order(load_tasks(find_repo(args.repo), args.job))
    if args.json:
        emit_json([t.model_dump(mode="json") for t in tasks])
        return 0
    if not tasks:
        print("no task definitions yet")
        return 0
    print_table(["JOB", "TASK", "KIND", "DEPENDS ON", "GATE", "TITLE"],
                [[t.job_id, t.id, t.kind, ",".join(t.depends_on) or "-", t.effective_gate(), t.title]
                 for t in tasks])
    return 0


def define_tasks(layout: Any, project: Any, entries: Any, job: str | None, replace: bool, source: str,
                 via: str) -> tuple[list[Any], set[str]]:
    """Validate task entries and merge them into .ai/tasks.yaml by id (the job's whole graph with
    `replace`); returns (the tasks, their jobs). `source` names the entries in messages, `via` who
    defined them in the task.defined events."""
    from pilothouse.core.commands.supervise import refuse_if_planned
    from pilothouse.core.records import jobs
    from pilothouse.core.records.taskgraph import load_tasks, save_tasks, validate_tasks
    from pilothouse.core.state.events import EventLog
    from pilothouse.providers.errors import UserError

    if not isinstance(entries, list) or not entries:
        raise UserError(f"{source}: expected a list of task entries (or `tasks:` with one): add at least one")
    job_ids = {job} if job else {e.get("job_id") for e in entries if isinstance(e, dict)}
    if None in job_ids or not job_ids:
        raise UserError(f"{source}: some entries have no job_id: add job_id to each, or pass --job NAME")
    for name in job_ids:
        record = jobs.load_job(layout, str(name))  # the job must exist
        refuse_if_planned(layout, record.name, record.revision)
    existing = load_tasks(layout)
    if replace:
        existing = [t for t in existing if t.job_id not in job_ids]
    tasks = validate_tasks(entries, project, existing, job=job)
    if replace and len(job_ids) != 1:
        raise UserError("--replace works on one job at a time: pass --job NAME")
    save_tasks(layout, tasks, replace_job=next(iter(job_ids)) if replace else None)
    log = EventLog(layout.events)
    for t in tasks:
        log.append("task.defined", job=t.job_id, task=t.id,
                   data={"kind": t.kind, "depends_on": t.depends_on, "source": via})
    return tasks, {str(j) for j in job_ids}
