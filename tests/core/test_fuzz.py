"""Property-based fuzzing of every file a user or a worker can put in front of pilothouse:
project.yaml, tasks.yaml, provider YAML, scenario YAML and event lines. The property is always
the same: the reader returns or raises one UserError — never another exception, never a hang
(each example runs under a CPU-time alarm), never a message of more than one line.

The quick profile runs with every suite; the `slow` one runs all of them together with more
examples (`-m slow`, its count from PILOTHOUSE_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pilothouse.core.records.layout import RepoLayout
from pilothouse.providers.errors import UserError

EXAMPLE_SECONDS = 5  # one example using more CPU time than this is a hang
QUICK = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
# the long run: PILOTHOUSE_FUZZ_EXAMPLES=20000 for a night's hunt
LONG = settings(max_examples=int(os.environ.get("PILOTHOUSE_FUZZ_EXAMPLES", "500")), deadline=None,
                suppress_health_check=list(HealthCheck))


class Hang(Exception):
    pass


@contextmanager
def bounded(seconds: float = EXAMPLE_SECONDS) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"an example ran longer than {seconds}s")

    # CPU time, not wall-clock time: on a machine busy with other work an example waits for a core
    # without being any nearer a hang
    old = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def only_user_errors(fn: Callable[[], Any]) -> None:
    with bounded():
        try:
            fn()
        except UserError as exc:
            assert "\n" not in str(exc).strip(), str(exc)


# ---------------------------------------------------------------- what the files are made of

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["off", "on", "yes", "no", "~", "true", "sim", "claude-code", "/etc/passwd", "a\0b",
                     "../x", "feature", "once", "fast", "SAFE_PARALLEL", "plan", "code"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)


def shaped(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Mappings that use the file's own keys (so validation goes deep), with any values."""
    return st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=10)), values, max_size=len(keys))


def dumped(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    return strategy.map(lambda v: yaml.safe_dump(v, allow_unicode=True))


def mutated(base: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """The YAML as text, or with a slice replaced by anything (bad bytes, brackets, anchors)."""
    junk = st.one_of(st.binary(max_size=20), st.sampled_from([b"[" * 80, b"&a [*a]", b"*nope", b"\xff\xfe",
                                                              b"\t", b": :", b"!!python/object:os.system"]))

    @st.composite
    def build(draw: Any) -> bytes:
        text = draw(base).encode()
        if draw(st.booleans()):
            i = draw(st.integers(0, len(text)))
            j = draw(st.integers(i, len(text)))
            text = text[:i] + draw(junk) + text[j:]
        return text
    return build()


PROJECT_KEYS = ["workflow", "gates", "setup", "model_policy", "budgets", "hotspots", "contracts",
                "integration_branch", "max_workers", "worker_nice", "confinement", "network",
                "availability_poll_seconds", "sim_scenario"]
project_docs = st.one_of(
    dumped(shaped(PROJECT_KEYS)),
    dumped(st.fixed_dictionaries({"gates": st.fixed_dictionaries({"fast": scalars, "full": scalars})},
                                 optional={"workflow": shaped(["mode", "review"]),
                                           "model_policy": shaped(["roles", "assignments", "default_assignment"]),
                                           "sim_scenario": scalars, "max_workers": scalars})),
    st.text(max_size=200),
)
TASK_KEYS = ["id", "title", "kind", "depends_on", "expected_paths", "job_id", "complexity", "acceptance"]
task_docs = st.one_of(
    dumped(st.fixed_dictionaries({"tasks": st.lists(shaped(TASK_KEYS), max_size=5)})),
    dumped(st.fixed_dictionaries({"tasks": st.lists(st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "b", "c"]), "title": scalars, "job_id": st.just("demo"),
         "depends_on": st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=3)}), max_size=4)})),
    st.text(max_size=200),
)
PROVIDER_KEYS = ["key", "name", "runner", "base_url", "model_id", "provider_id", "api_key_env", "models",
                 "limits", "wire"]
provider_docs = st.one_of(dumped(shaped(PROVIDER_KEYS).map(lambda d: {"key": "fz", **d})), st.text(max_size=200))
SCENARIO_KEYS = ["name", "description", "scripts"]
scenario_docs = st.one_of(
    dumped(shaped(SCENARIO_KEYS)),
    dumped(st.fixed_dictionaries({"name": scalars, "description": scalars, "scripts": st.lists(
        shaped(["match", "turns"]), max_size=3)})),
    st.text(max_size=200),
)


# ---------------------------------------------------------------- the properties


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepoLayout:
    import subprocess

    root = tmp_path_factory.mktemp("fuzz") / "repo"
    (root / ".ai").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return RepoLayout(root)


def _project(layout: RepoLayout, data: bytes) -> None:
    from pilothouse.core.records.check import check_repo
    from pilothouse.core.records.project import load_project

    layout.project_yaml.write_bytes(data)
    only_user_errors(lambda: load_project(layout))
    with bounded():
        assert all("\n" not in line for line in check_repo(layout))


def _tasks(layout: RepoLayout, data: bytes) -> None:
    from pilothouse.core.records.project import ProjectConfig, parse_yaml
    from pilothouse.core.records.taskgraph import TaskGraphError, load_tasks, validate_tasks

    layout.tasks_yaml.write_bytes(data)
    only_user_errors(lambda: load_tasks(layout))
    project = ProjectConfig.model_validate({"gates": {"fast": "true", "full": "true"}})

    def define() -> None:
        doc = parse_yaml(data.decode("utf-8", "replace"), "t.yaml")
        entries = doc.get("tasks") if isinstance(doc, dict) else doc
        try:
            validate_tasks(entries if isinstance(entries, list) else [entries], project, job="demo")
        except TaskGraphError as exc:
            raise UserError(str(exc).replace("\n", "; ")) from None
    only_user_errors(define)


def _provider(data: bytes) -> None:
    from pilothouse.providers import registry

    folder = registry.user_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fz.yaml").write_bytes(data)
    only_user_errors(registry.load_providers)


def _scenario(tmp: Path, data: bytes) -> None:
    from pilothouse.providers.sim.scenario import load_scenario

    path = tmp / "fz.yaml"
    path.write_bytes(data)
    only_user_errors(lambda: load_scenario(str(path)))


@QUICK
@given(mutated(project_docs))
def test_project_yaml(repo: RepoLayout, data: bytes) -> None:
    _project(repo, data)


@QUICK
@given(mutated(task_docs))
# found by test_everything_long: a list where a dependency's name belongs (TypeError: unhashable)
@example(b"tasks:\n- id: a\n  title: t\n  job_id: demo\n  depends_on: [[null, u]]\n")
def test_tasks_yaml(repo: RepoLayout, data: bytes) -> None:
    _tasks(repo, data)


@QUICK
@given(mutated(provider_docs))
def test_provider_yaml(data: bytes) -> None:
    _provider(data)


@QUICK
@given(mutated(scenario_docs))
def test_scenario_yaml(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    _scenario(tmp_path_factory.mktemp("sc"), data)


# ---------------------------------------------------------------- event lines

event_fields = st.fixed_dictionaries({}, optional={
    "seq": st.one_of(st.integers(min_value=-5, max_value=2**64), scalars), "type": st.one_of(
        st.sampled_from(["task.state", "run.finished", "problem.opened", "gate.finished", "review.finished",
                         "run.usage", "merge.finished", "quota.changed", "supervisor.started"]), scalars),
    "ts": scalars, "job": st.one_of(st.just("j"), values), "task": st.one_of(st.just("a"), values),
    "run": values, "data": st.one_of(shaped(["from", "to", "reason", "tokens", "replies", "summaries", "findings",
                                             "round", "passed", "code", "words", "duration_s", "error"]), values)})
event_lines = st.one_of(
    event_fields.map(lambda d: json.dumps(d, default=str).encode()),
    st.binary(max_size=80),
    st.sampled_from([b'{"seq": Infinity, "type": "x"}', b'{"seq": NaN}', b"[" * 5000, b"{}", b"null"]),
)


def _events(tmp: Path, lines: list[bytes]) -> None:
    from pilothouse.core.commands.live import format_event
    from pilothouse.core.queries.why import explain, explain_job
    from pilothouse.core.queries.work import affected
    from pilothouse.core.state.events import EventLog, EventTailer
    from pilothouse.tui.format import event_text

    path = tmp / "runtime" / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    with bounded():
        tailer = EventTailer(path)
        events = tailer.read_new()
        assert len(events) + tailer.skipped <= len([x for x in lines for _ in x.split(b"\n")])
        back = EventTailer(path).tail(5)
        assert back == events[-5:]
        for ev in events:
            assert "\n" not in format_event(ev)
            event_text(ev)
        affected(events)
        layout = RepoLayout(tmp)
        explain(layout, "j", "a", events)
        explain_job(layout, "j", events)
        written = EventLog(path).append("job.created", job="j")
        assert EventTailer(path).read_new()[-1] == written


@QUICK
@given(st.lists(event_lines, max_size=12))
def test_event_lines(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    _events(tmp_path_factory.mktemp("ev"), lines)


# ---------------------------------------------------------------- names, records and the store

# what a person or a host types where a name is expected: long, with control characters, NULs
typed = st.one_of(st.text(max_size=40), st.text(min_size=250, max_size=600),
                  st.text(alphabet=st.characters(max_codepoint=0x3f), max_size=20), st.just("a" * 300 + "/x"))


def _names(value: str) -> None:
    from pilothouse.core.records.jobs import validate_name
    from pilothouse.providers import argcheck

    for check in (lambda: argcheck.check_text(value, "name"), lambda: argcheck.check_path(value, "--scenario"),
                  lambda: argcheck.check_host(value), lambda: validate_name(value)):
        only_user_errors(check)


@QUICK
@given(typed)
def test_names_and_arguments(value: str) -> None:
    from pilothouse.core.mcp.base import MAX_MESSAGE, check_arguments

    _names(value)
    try:
        check_arguments("job_decide", {"name": value, "text": value, "nested": [{"k": value}]})
    except UserError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= MAX_MESSAGE + 200, str(exc)


def _store(tmp: Path, data: bytes) -> None:
    """state.db made of these bytes (its repository shows a supervisor ran): a reader gets the store or
    one line naming its damage, never an empty answer, another exception or a hang."""
    from pilothouse.core.state import store

    runtime = tmp / ".ai" / "runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    (runtime / "events.jsonl").write_text('{"seq":1,"ts":"t","type":"supervisor.started","data":{}}\n')
    for p in runtime.glob("state.db*"):
        p.unlink()
    (runtime / "state.db").write_bytes(data)

    def read() -> None:
        conn = store.open_reader(runtime / "state.db")
        assert conn is not None  # a supervisor ran here: "nothing yet" would be a lie
        try:
            conn.execute("SELECT count(*) FROM jobs_state").fetchone()
        finally:
            conn.close()
    only_user_errors(read)


@QUICK
@given(st.one_of(st.binary(max_size=2048),
                 st.builds(lambda head, tail: head + tail, st.just(b"SQLite format 3\x00"), st.binary(max_size=4096))))
def test_state_db_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    _store(tmp_path_factory.mktemp("db"), data)


@QUICK
@given(st.binary(max_size=2048))
def test_job_record_bytes(repo: RepoLayout, data: bytes) -> None:
    from pilothouse.core.records.jobs import list_jobs, load_job

    repo.jobs_dir.mkdir(parents=True, exist_ok=True)
    (repo.jobs_dir / "fz.json").write_bytes(data)
    only_user_errors(lambda: load_job(repo, "fz"))
    only_user_errors(lambda: list_jobs(repo))


# ---------------------------------------------------------------- the long run

@pytest.mark.slow
@LONG
@given(mutated(project_docs), mutated(task_docs), mutated(provider_docs), mutated(scenario_docs),
       st.lists(event_lines, max_size=20))
def test_everything_long(repo: RepoLayout, tmp_path_factory: pytest.TempPathFactory, project: bytes,
                         tasks: bytes, provider: bytes, scenario: bytes, lines: list[bytes]) -> None:
    _project(repo, project)
    _tasks(repo, tasks)
    _provider(provider)
    tmp = tmp_path_factory.mktemp("long")
    _scenario(tmp, scenario)
    _events(tmp, lines)
    _store(tmp, project + tasks)
