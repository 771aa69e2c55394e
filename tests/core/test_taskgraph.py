"""Task definitions: every bad entry named by id, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilothouse.core.records.layout import RepoLayout
from pilothouse.core.records.project import ProjectConfig
from pilothouse.core.records.taskgraph import (
    TaskGraphError,
    dependents_of,
    load_tasks,
    save_tasks,
    topo_order,
    validate_tasks,
)

PROJECT = ProjectConfig.model_validate({"gates": {"fast": "a", "full": "b"},
                                        "model_policy": {"assignments": {"main": {"provider": "sim"}}}})


def t(tid: str, **kw):
    return {"id": tid, "title": f"do {tid}", **kw}


def errors_of(entries, **kw) -> list[str]:
    with pytest.raises(TaskGraphError) as err:
        validate_tasks(entries, PROJECT, job="j1", **kw)
    return err.value.errors


def test_valid_graph() -> None:
    tasks = validate_tasks([
        t("contract", kind="CONTRACT_CHANGE", expected_paths={"write": ["api.py"]}),
        t("impl", kind="DEPENDENT", depends_on=["contract"], gate_level="fast", acceptance="works",
          model_assignment="main"),
        t("look", kind="RESEARCH", expected_paths={"read": ["src/"]}),
    ], PROJECT, job="j1")
    assert [x.job_id for x in tasks] == ["j1"] * 3
    assert tasks[1].acceptance == ["works"] and tasks[1].effective_gate() == "fast"
    assert tasks[0].effective_gate() == "full"


def test_unknown_key_and_kind() -> None:
    errs = errors_of([t("a", colour="red"), t("b", kind="PARALLEL")])
    assert any(e.startswith("task 'a': unknown key 'colour': remove it") for e in errs)
    assert any(e.startswith("task 'b': kind: unknown kind 'PARALLEL': use one of SAFE_PARALLEL") for e in errs)


@pytest.mark.parametrize("path, why", [("/etc/passwd", "is absolute"), ("../x.py", "leaves the repository"),
                                        ("src/../../x", "leaves the repository")])
def test_bad_paths(path: str, why: str) -> None:
    errs = errors_of([t("a", expected_paths={"write": [path]})])
    assert errs == [f"task 'a': expected_paths.write: '{path}' {why}" + errs[0].split(why, 1)[1]]
    assert why in errs[0]


def test_unknown_dep_cycle_and_self() -> None:
    errs = errors_of([t("a", depends_on=["ghost"]), t("b", depends_on=["c"]), t("c", depends_on=["b"]),
                      t("d", depends_on=["d"])])
    assert any("task 'a': depends_on: unknown task 'ghost'" in e for e in errs)
    assert any("dependency cycle b -> c -> b" in e for e in errs)
    assert any("task 'd': depends_on: a task cannot depend on itself" in e for e in errs)


def test_undefined_gate_research_writes_duplicate_and_assignment() -> None:
    errs = errors_of([t("a", gate_level="slow"), t("r", kind="RESEARCH", expected_paths={"write": ["x"]}),
                      t("a"), t("m", model_assignment="nope")])
    assert any("task 'a': gate_level: gate 'slow' is not defined" in e and "fast, full" in e for e in errs)
    assert any("task 'r': expected_paths.write: a RESEARCH task never writes" in e for e in errs)
    assert any("task 'a': id: defined twice" in e for e in errs)
    assert any("task 'm': model_assignment: 'nope'" in e for e in errs)


def test_missing_title_and_bad_id() -> None:
    errs = errors_of([{"id": "a"}, {"id": "Bad Id", "title": "x"}, "not a mapping"])
    assert any(e.startswith("task 'a': title: Field required: add it") for e in errs)
    assert any(e.startswith("entry #2: id: 'Bad Id' is not a valid id") for e in errs)
    assert any(e.startswith("entry #3: expected a mapping") for e in errs)


def test_deps_on_existing_tasks_and_cycles_through_them() -> None:
    existing = validate_tasks([t("base")], PROJECT, job="j1")
    ok = validate_tasks([t("next", depends_on=["base"])], PROJECT, existing, job="j1")
    assert ok[0].depends_on == ["base"]
    # redefining an existing task may close a cycle
    errs = errors_of([t("base", depends_on=["next"])], existing=[*existing, *ok])
    assert any("cycle" in e for e in errs)
    # another job's task is not a dependency
    errs = errors_of([t("x", depends_on=["base"])], existing=validate_tasks([t("base")], PROJECT, job="j2"))
    assert any("unknown task 'base' in job 'j1'" in e for e in errs)


def test_job_id_mismatch() -> None:
    errs = errors_of([t("a", job_id="other")])
    assert "job_id: 'other'" in errs[0]


def test_message_of_error_is_one_line() -> None:
    with pytest.raises(TaskGraphError) as err:
        validate_tasks([t("a", kind="X"), t("b", depends_on=["z"])], PROJECT, job="j1")
    assert "\n" not in str(err.value) and str(err.value).startswith("2 problems:")


def test_save_merges_by_job_and_id(tmp_path: Path) -> None:
    layout = RepoLayout(tmp_path)
    save_tasks(layout, validate_tasks([t("a"), t("b", depends_on=["a"])], PROJECT, job="j1"))
    save_tasks(layout, validate_tasks([t("a", title="other job")], PROJECT, job="j2"))
    save_tasks(layout, validate_tasks([t("b", title="changed", depends_on=["a"]), t("c")], PROJECT,
                                      load_tasks(layout), job="j1"))
    all_tasks = load_tasks(layout)
    assert [(x.job_id, x.id) for x in all_tasks] == [("j1", "a"), ("j1", "b"), ("j2", "a"), ("j1", "c")]
    assert load_tasks(layout, "j1")[1].title == "changed"
    save_tasks(layout, validate_tasks([t("z")], PROJECT, job="j1"), replace_job="j1")
    assert [x.id for x in load_tasks(layout, "j1")] == ["z"]
    assert [x.id for x in load_tasks(layout, "j2")] == ["a"]


def test_topo_and_dependents() -> None:
    tasks = validate_tasks([t("d", depends_on=["b", "c"]), t("b", depends_on=["a"]), t("c", depends_on=["a"]),
                            t("a"), t("e")], PROJECT, job="j1")
    order = [x.id for x in topo_order(tasks)]
    assert order.index("a") < order.index("b") < order.index("d") and order.index("c") < order.index("d")
    assert dependents_of(tasks, "a") == ["b", "c", "d"]
    assert dependents_of(tasks, "e") == []


def test_a_cycle_through_thousands_of_tasks_is_found_without_recursion() -> None:
    from pilothouse.core.records.taskgraph import find_cycle

    n = 5000
    graph = {f"t{i}": [f"t{i + 1}"] for i in range(n)}
    graph[f"t{n}"] = []
    assert find_cycle(graph) is None
    graph[f"t{n}"] = ["t0"]
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] == "t0" and len(cycle) == n + 2


def test_a_control_character_in_a_task_name_stays_escaped_in_one_line() -> None:
    errs = errors_of([t("a\nb"), t("c", depends_on=["x\ny"])])
    assert errs and all("\n" not in e for e in errs), errs
    assert any("id: 'a\\nb' is not a valid id" in e for e in errs)
    assert any("unknown task 'x\\ny'" in e for e in errs)


def test_a_definition_past_the_task_limit_is_refused_before_writing_and_the_file_stays_readable(
        tmp_path: Path) -> None:
    from pilothouse.core.records.taskgraph import MAX_TASKS
    from pilothouse.providers.errors import UserError

    layout = RepoLayout(tmp_path)
    save_tasks(layout, validate_tasks([t("a")], PROJECT, job="j1"))
    before = layout.tasks_yaml.read_text()
    many = validate_tasks([t(f"t{i}") for i in range(MAX_TASKS + 1)], PROJECT, job="j2")
    with pytest.raises(UserError, match=f"more than the limit of {MAX_TASKS}: define fewer tasks"):
        save_tasks(layout, many)
    assert layout.tasks_yaml.read_text() == before
    assert [x.id for x in load_tasks(layout)] == ["a"]
    # a file edited past the limit is refused by the reader with the same limit
    layout.tasks_yaml.write_text("tasks:\n" + "".join(f"- {{id: t{i}, title: x}}\n" for i in range(MAX_TASKS + 1)))
    with pytest.raises(UserError, match=f"more than the limit of {MAX_TASKS}"):
        load_tasks(layout)


@pytest.mark.parametrize("field, value, kind", [
    ("depends_on", [[None, "u"]], "DEPENDENT"), ("depends_on", [{"a": 1}, "zz"], "BAD"),
    ("skills", 5, "DEPENDENT"), ("expected_paths", {"read": {"a": 1}}, "DEPENDENT")])
def test_a_list_or_mapping_where_a_name_belongs_is_one_line_naming_the_field(field: str, value: object,
                                                                              kind: str) -> None:
    # a broken entry's dependencies are still checked by name: a list among them could not be
    # looked up (TypeError: unhashable type: 'list', found by tests/core/test_fuzz.py)
    errs = errors_of([t("a", **{field: value}, kind=kind)])
    assert all("\n" not in e for e in errs), errs
    assert any(e.startswith(f"task 'a': {field}") for e in errs), errs


def test_a_line_break_in_a_gate_or_assignment_name_stays_escaped() -> None:
    errs = errors_of([t("a", gate_level="x\ny"), t("b", model_assignment="p\nq")])
    assert any("gate 'x\\ny' is not defined" in e for e in errs), errs
    assert any("model_assignment: 'p\\nq' is not in" in e for e in errs), errs
