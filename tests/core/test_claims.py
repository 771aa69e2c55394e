"""A result block is a claim, checked against the prompt and the work (core/dispatch/claims.py):
each case is a real dispatch on the sim, with a real git worktree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pilothouse.core.dispatch.claims import check_facts

PLACEHOLDER_EXPLORE = '{"facts": [{"fact": "<one finding>", "file_line": "<path>:<line>"}], "truncated": false}'


def _dispatch(cli, repo: Path, tmp_path: Path, mode: str, turns: str) -> dict:
    scenario = tmp_path / "claims.yaml"
    scenario.write_text(f"name: claims\ndescription: results that claim more than was done\nscripts:\n"
                        f"  - turns:\n{turns}")
    (tmp_path / "task.md").write_text("Do the task.\n")
    r = cli("dispatch", "--provider", "sim", "--mode", mode, "--workdir", str(repo), "--task-file",
            str(tmp_path / "task.md"), "--scenario", str(scenario))
    out = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert r.returncode == 0 and len(out) == 2, r.stdout + r.stderr
    return out[1]


def _say(block: str, before: str = "") -> str:
    return before + "      - say: |\n          Done.\n          <!--RESULT-->" + block + "<!--/RESULT-->\n"


def _code(files: list[str], status: str = "complete") -> str:
    return json.dumps({"status": status, "files_changed": files, "validation": {"commands": [], "passed": True},
                       "risks": []})


def test_the_prompts_own_placeholder_block_is_not_a_result(cli, git_repo, tmp_path):
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say(PLACEHOLDER_EXPLORE))
    assert (v["verdict"], v["parse_state"], v["result"]) == ("partial", "malformed", None)
    assert v["parse_error"] == ("field 'facts[0].fact' still holds the prompt's placeholder '<one finding>': "
                                "the block is the example, not an answer")
    assert v["reason"] == f"result block rejected: {v['parse_error']}"


def test_a_placeholder_in_any_field_not_only_the_first_is_not_a_result(cli, git_repo, tmp_path):
    # a worker that answers the first field and copies the rest of the example has not answered
    facts = [{"fact": "adds", "file_line": "src/calc.py:2"}, {"fact": "<one finding>", "file_line": "src/calc.py:1"}]
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say(json.dumps({"facts": facts, "truncated": False})))
    assert (v["verdict"], v["parse_state"]) == ("partial", "malformed"), v
    assert v["parse_error"] == ("field 'facts[1].fact' still holds the prompt's placeholder '<one finding>': "
                                "the block is the example, not an answer")
    facts = [{"fact": "adds", "file_line": "src/calc.py:2"}, {"fact": "returns", "file_line": "<path>:<line>"}]
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say(json.dumps({"facts": facts, "truncated": False})))
    assert v["parse_error"].startswith("field 'facts[1].file_line' still holds the prompt's placeholder"), v


def test_an_empty_required_field_is_not_a_result(cli, git_repo, tmp_path):
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say('{"facts": [], "truncated": false}'))
    assert (v["verdict"], v["parse_state"]) == ("partial", "malformed")
    assert v["parse_error"] == "field 'facts' is empty: a result needs it filled in"
    # a required field inside each fact counts too
    v = _dispatch(cli, git_repo, tmp_path, "explore",
                  _say('{"facts": [{"fact": "adds", "file_line": "src/calc.py:1"}, {"fact": " ", "file_line": "src/calc.py:2"}]}'))
    assert v["parse_error"] == "field 'facts[1].fact' is empty: a result needs it filled in", v


def test_the_facts_that_cite_nothing_are_named_up_to_three(cli, git_repo, tmp_path):
    facts = [{"fact": f"claim {i}", "file_line": f"nope{i}.py:1"} for i in range(5)]
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say(json.dumps({"facts": facts})))
    assert v["parse_error"] == ("5 of 5 facts cite no line of a file in the workdir: "
                                "'nope0.py:1', 'nope1.py:1', 'nope2.py:1'")


def test_explore_facts_must_cite_real_files_inside_the_workdir_and_links_are_not_followed(cli, git_repo, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("one\ntwo\nthree\n")
    os.symlink(outside, git_repo / "link.txt")
    for cited in ("src/nope.py:1", "src/calc.py:99", "../secret.txt:1", f"{outside}:1", "link.txt:1"):
        block = json.dumps({"facts": [{"fact": "adds", "file_line": "src/calc.py:2"},
                                      {"fact": "claimed", "file_line": cited}]})
        v = _dispatch(cli, git_repo, tmp_path, "explore", _say(block))
        assert (v["verdict"], v["parse_state"]) == ("partial", "malformed"), (cited, v)
        assert v["parse_error"] == f"1 of 2 facts cite no line of a file in the workdir: {cited[:80]!r}"
    v = _dispatch(cli, git_repo, tmp_path, "explore",
                  _say(json.dumps({"facts": [{"fact": "adds", "file_line": "./src/calc.py:1-2"}]})))
    assert (v["verdict"], v["parse_state"]) == ("completed", "parsed")


def test_complete_with_no_change_in_the_worktree_is_empty(cli, git_repo, tmp_path):
    v = _dispatch(cli, git_repo, tmp_path, "code", _say(_code(["src/slug.py"])))
    assert (v["verdict"], v["parse_state"]) == ("empty", "parsed")
    assert v["reason"] == ("the result says complete (files_changed: src/slug.py), but the run made no change "
                           "in the worktree")


def test_files_changed_must_be_files_the_run_changed(cli, git_repo, tmp_path):
    write = "      - say: Writing.\n        actions:\n          - write: {path: src/slug.py, content: \"x = 1\\n\"}\n"
    v = _dispatch(cli, git_repo, tmp_path, "code", _say(_code(["src/slug.py", "src/calc.py"]), write))
    assert (v["verdict"], v["parse_state"]) == ("partial", "parsed")
    assert v["reason"] == "files_changed names src/calc.py, which the run did not change (it changed src/slug.py)"
    (git_repo / "src/slug.py").unlink()
    v = _dispatch(cli, git_repo, tmp_path, "code", _say(_code(["src/slug.py"]), write))
    assert (v["verdict"], v["reason"]) == ("completed", None)


def test_a_claimed_file_is_the_changed_path_whole_never_its_head_or_tail(cli, git_repo, tmp_path):
    # `slug.py`, `src/slug` or `src` is not src/slug.py: a name that only ends or starts a changed path
    # is a file the run did not change
    write = "      - say: Writing.\n        actions:\n          - write: {path: src/slug.py, content: \"x = 2\\n\"}\n"
    for tail in ("slug.py", "py", "rc/slug.py", "src/slug", "src", "src/"):
        v = _dispatch(cli, git_repo, tmp_path, "code", _say(_code([tail]), write))
        assert (v["verdict"], v["reason"]) == (
            "partial", f"files_changed names {tail}, which the run did not change (it changed src/slug.py)"), tail
        (git_repo / "src/slug.py").unlink()
    v = _dispatch(cli, git_repo, tmp_path, "code", _say(_code(["./src/slug.py"]), write))
    assert (v["verdict"], v["reason"]) == ("completed", None)  # the same path, written relative


# (what the file holds, the last line a fact may cite): a final newline ends a line, it starts none
LAST_LINE = [(b"", 0), (b"\n", 1), (b"one", 1), (b"one\n", 1), (b"one\ntwo", 2), (b"one\ntwo\n", 2),
             (b"one\n\n", 2), (b"one\ntwo\n\n\n", 4)]


@pytest.mark.parametrize("data, last", LAST_LINE)
def test_a_fact_may_cite_up_to_the_files_last_line_and_not_one_past_it(tmp_path, data, last):
    # the line check itself, on a real file: a dispatch per boundary would add nothing to it
    (tmp_path / "f.py").write_bytes(data)

    def cites(line: int) -> bool:
        return check_facts({"facts": [{"fact": "x", "file_line": f"f.py:{line}"}]}, tmp_path) is None

    assert [n for n in range(1, last + 3) if cites(n)] == list(range(1, last + 1))
