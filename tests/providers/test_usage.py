"""Usage labels and how a count is shown with its label (providers/usage.py)."""

from __future__ import annotations

import pytest
from pilothouse.providers.usage import combine, cost_label, label_of, tokens_text, verdict_tokens


@pytest.mark.parametrize("labels, label", [
    ([], "measured"), (["measured", None], "measured"), (["measured", "estimated"], "estimated"),
    (["estimated", "unknown", "measured"], "unknown"), (["bogus"], "measured"),
])
def test_a_sums_label_is_its_least_trustworthy_parts(labels, label):
    assert combine(labels) == label


@pytest.mark.parametrize("total, usage, text", [
    (1234, "measured", "1234 tokens"), (1234, None, "1234 tokens"),
    (1234, "estimated", "~1234 tokens (estimated)"),
    (None, "unknown", "? tokens"), (0, "unknown", "? tokens"),
    (1234, "unknown", "≥1234 tokens (some not reported)"),
])
def test_a_count_is_shown_with_how_it_was_counted_and_unknown_is_never_zero(total, usage, text):
    assert tokens_text(total, usage) == text


def test_a_verdict_nobody_counted_has_no_token_count():
    assert verdict_tokens({"tokens": None, "usage": "unknown"}) is None
    assert verdict_tokens({"tokens": {"input": 3, "output": 2, "reasoning": 1}, "usage": "estimated"}) == 6
    assert verdict_tokens({"tokens": {"input": 3, "output": 2}}) == 5 and label_of({}) == "measured"


@pytest.mark.parametrize(("usage", "providers", "label"), [
    ("measured", ["sim", "sim-flaky/m1", None], "simulator"),
    ("estimated", ["sim", "openai/gpt-x"], "estimated, part simulator"),
    ("measured", ["openai/gpt-x", "simulated-but-not-sim"], "measured"),
    ("unknown", [], "unknown"),
    (None, ["anthropic"], "measured"),
])
def test_a_cost_of_simulator_runs_says_so_and_any_other_keeps_its_usage_label(usage, providers, label):
    assert cost_label(usage, providers) == label
