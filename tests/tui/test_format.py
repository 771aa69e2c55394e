"""tui/format.py: how the cockpit shows a token count with how it was counted."""

from __future__ import annotations

import pytest
from pilothouse.tui import format as fmt


@pytest.mark.parametrize("n, usage, shown", [
    (1234, None, "1.2k"), (1234, "measured", "1.2k"), (1234, "estimated", "~1.2k"), (80, "estimated", "~80"),
    (0, "unknown", "?"), (None, "unknown", "?"), (2500, "unknown", "≥2.5k"), (0, None, "0"),
])
def test_a_token_column_marks_estimates_and_never_shows_0_for_unreported(n, usage, shown):
    assert fmt.tokens(n, usage) == shown


def test_event_lines_say_when_usage_was_not_reported_or_estimated():
    unknown = {"type": "run.finished", "data": {"verdict": "partial", "tokens": None, "usage": "unknown"}}
    assert fmt.describe(unknown) == "partial  ? tok"
    estimated = {"type": "run.usage", "data": {"tokens": {"input": 3000, "output": 90}, "usage": "estimated"}}
    assert fmt.describe(estimated) == "~3.0k in / ~90 out"
    totals: dict[str, int] = {}
    line = fmt.activity_text({"kind": "usage", "input": 30, "output": 9}, totals)
    assert line is not None and line.plain.endswith("usage +30 in / +9 out  (total 30 in, 9 out)")
    line = fmt.activity_text({"kind": "usage", "input": 40, "output": 1, "source": "estimated"}, totals)
    assert line is not None and "usage +40 in / +1 out (estimated)  (total ~70 in, ~10 out)" in line.plain
    assert fmt.usage_label(totals) == "estimated"


@pytest.mark.parametrize(("event", "style"), [
    ({"type": "problem.opened", "data": {"code": "KTRWMB"}}, "bold red"),
    ({"type": "problem.answered", "data": {"code": "KTRWMB", "reply": "retry"}}, "yellow"),
    ({"type": "problem.closed", "data": {"code": "KTRWMB", "outcome": "back to gating"}}, "green"),
    ({"type": "gate.finished", "data": {"level": "fast", "passed": True}}, "green"),
    ({"type": "gate.finished", "data": {"level": "fast", "passed": False}}, "bold red"),
    ({"type": "quota.changed", "data": {"provider": "sim-b", "used_pct": 100}}, "yellow"),
    ({"type": "quota.changed", "data": {"provider": "sim-b", "blocked": False,
                                        "reason": "sim-b answered a request (probe): available again"}}, "green"),
    ({"type": "review.finished", "data": {"overall": "PASS"}}, "green"),
    ({"type": "review.finished", "data": {"overall": "CHANGES"}}, "yellow"),
    ({"type": "run.finished", "data": {"verdict": "error"}}, "red"),
    ({"type": "run.finished", "data": {"verdict": "completed"}}, "cyan"),
    ({"type": "job.accepted"}, "bold green"),
])
def test_an_events_colour_follows_its_outcome_not_its_family(event, style) -> None:
    from pilothouse.tui.format import event_style, event_text

    assert event_style(event) == style
    assert event_text({**event, "ts": "2026-11-29T07:00:00Z"}).spans[1].style == style
