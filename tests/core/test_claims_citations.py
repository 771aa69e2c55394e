"""What a result's citations must be: a fact cites one line of one file, and a code run's reason names its files up to five.

Real dispatches on the sim in a real git repository (core/dispatch/claims.py), and the fact check
itself on real files where a dispatch per case would add nothing.
"""

from __future__ import annotations

import json

import pytest
from pilothouse.core.dispatch.claims import check_facts
from test_claims import _dispatch, _say


def _writes(paths: list[str]) -> str:
    acts = "".join(f"          - write: {{path: {p}, content: \"x = 1\\n\"}}\n" for p in paths)
    return "      - say: Writing.\n        actions:\n" + acts


# the workdir's src/calc.py has two lines: each of these reads as more than one citation, or none
NOT_ONE_LINE = ["src/calc.py:1\nsrc/calc.py:2", "src/calc.py\n:1", "src/calc.py:1\n\nsrc/calc.py", "a\nb"]


@pytest.mark.parametrize("cited", NOT_ONE_LINE, ids=repr)
def test_a_citation_spanning_lines_cites_no_line_and_the_result_is_refused(cli, git_repo, tmp_path, cited):
    block = json.dumps({"facts": [{"fact": "adds", "file_line": "src/calc.py:2"},
                                  {"fact": "claimed", "file_line": cited}]})
    v = _dispatch(cli, git_repo, tmp_path, "explore", _say(block))
    assert (v["verdict"], v["parse_state"]) == ("partial", "malformed"), v
    assert v["parse_error"] == f"1 of 2 facts cite no line of a file in the workdir: {cited!r}"


# a fact's file_line as the check receives it: none of these names a file
NO_PATH = ["", "   ", "\n", ":", "src/calc.py:1\nsrc/calc.py:2", " src/calc.py:1 \n src/calc.py:2 "]


@pytest.mark.parametrize("cited", NO_PATH, ids=repr)
def test_a_citation_with_no_single_path_cites_nothing(tmp_path, cited):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    facts = [{"fact": "adds", "file_line": "src/calc.py:1"}, {"fact": "claimed", "file_line": cited}]
    assert check_facts({"facts": facts}, tmp_path) == f"1 of 2 facts cite no line of a file in the workdir: {cited!r}"
    # a fact without a file_line at all cites nothing either
    assert check_facts({"facts": [facts[0], {"fact": "claimed"}]}, tmp_path) == (
        "1 of 2 facts cite no line of a file in the workdir: ''")


# (files the run wrote, files the result claims it did not write): the reason names up to five of each
CLAIMS = [(1, 1), (2, 5), (2, 6), (2, 8), (5, 1), (6, 1), (8, 2), (6, 6)]


@pytest.mark.parametrize(("wrote", "invented"), CLAIMS)
def test_files_changed_that_the_run_did_not_change_are_named_up_to_five(cli, git_repo, tmp_path, wrote, invented):
    written = [f"src/w{i}.py" for i in range(wrote)]
    made_up = [f"src/made_up_{i}.py" for i in range(invented)]
    block = json.dumps({"status": "complete", "files_changed": written + made_up,
                        "validation": {"commands": [], "passed": True}, "risks": []})
    v = _dispatch(cli, git_repo, tmp_path, "code", _say(block, _writes(written)))
    assert (v["verdict"], v["parse_state"]) == ("partial", "parsed"), v
    assert v["reason"] == (f"files_changed names {', '.join(made_up[:5])}, which the run did not change "
                           f"(it changed {', '.join(written[:5])})")
    assert v["reason"].count("made_up_") == min(invented, 5) and v["reason"].count("/w") == min(wrote, 5)
