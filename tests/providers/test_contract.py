"""The pydantic contract: what a malformed result block is said to be."""

from __future__ import annotations

from pilothouse.providers import contract


def test_a_malformed_result_names_its_first_wrong_field() -> None:
    """A block wrong in several places is reported by the first of them (the order of the schema),
    the one a builder reading the message should fix first."""
    got = contract.parse_result('<!--RESULT-->{"overall": "MEH", "findings": 1}<!--/RESULT-->', "review")
    assert (got.state, got.result, got.error) == (
        "malformed", None, "field 'overall': Input should be 'PASS', 'CHANGES' or 'REJECT'")
    got = contract.parse_result('<!--RESULT-->{"files_changed": 3}<!--/RESULT-->', "resume")
    assert (got.state, got.error) == ("malformed", "field 'status': Field required")
