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


def test_runner_events_are_slotted_and_take_no_stray_attributes() -> None:
    """A run emits thousands of events: each is a slotted dataclass (no per-event __dict__), and a
    misspelt field is an error rather than a silently ignored attribute."""
    import typing

    import pytest
    from pilothouse.providers import contract_events as ce

    kinds = typing.get_args(ce.RunnerEvent)
    assert {k.__name__ for k in kinds} == {"SessionEvent", "TextEvent", "ReasoningEvent", "ToolEvent", "UsageEvent",
                                           "QuotaEvent", "ErrorEvent", "LimitEvent"}
    for cls in kinds:
        ev = cls(*(["x"] * sum(1 for f in cls.__dataclass_fields__.values() if f.default is f.default_factory)))
        assert not hasattr(ev, "__dict__"), cls.__name__
        with pytest.raises(AttributeError):
            ev.statuss = "ok"
