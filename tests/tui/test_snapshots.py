"""SVG snapshots of the cockpit at 80x24 and 120x40, from deterministic state and a frozen clock.

Regenerate after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.mark.parametrize("size", SIZES)
def test_dashboard(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_run_detail(snap_compare, cockpit_repo, make_app, size) -> None:
    # 3: the Tasks panel; j: calendar-api (running); enter: its run
    assert snap_compare(make_app(cockpit_repo), press=["3", "j", "enter"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_problem_dialog(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["4", "enter"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_hint_words_dialog(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["4", "h", *"add the 7th column"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare, cockpit_repo, make_app, size) -> None:
    assert snap_compare(make_app(cockpit_repo), press=["question_mark"], terminal_size=size)


def test_run_detail_of_a_task_stopped_by_its_gate(snap_compare, cockpit_repo, make_app) -> None:
    # 3: the Tasks panel; j j: calendar-ui (stopped: the fast gate failed twice); enter: its run
    assert snap_compare(make_app(cockpit_repo), press=["3", "j", "j", "enter"], terminal_size=(120, 40))


def test_run_detail_with_review_findings(snap_compare, cockpit_repo, make_app) -> None:
    # 3: the Tasks panel; enter: calendar-store (done, reviewed with CHANGES)
    assert snap_compare(make_app(cockpit_repo), press=["3", "enter"], terminal_size=(120, 40))
