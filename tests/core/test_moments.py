"""When a job's events happened (core/queries/moments.py): a stamp past tomorrow or out of the log's
order never starts or ends the job; a log in order is read as it is."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pilothouse.core.queries.moments import MAX_AHEAD_S, moments, next_moment, span

NOW = 1_796_000_000.0   # the reading machine's clock in these tests (late 2026)
Y9999 = 253_402_300_799.0  # 9999-12-31T23:59:59Z


def _job(n: int = 6, start: float = NOW - 3600) -> list[float | None]:
    return [start + 10 * i for i in range(n)]


def test_a_log_in_order_is_read_as_it_is_equal_stamps_and_unreadable_lines_included() -> None:
    stamps = [*_job(4), None, NOW - 3600 + 30, NOW - 3600 + 40]
    assert moments(stamps, NOW) == stamps  # None: a line with no readable stamp has no moment, as before


@pytest.mark.parametrize("where", [0, 3, 5])
def test_a_stamp_in_year_9999_anywhere_is_no_moment_and_never_the_jobs_start_or_end(where: int) -> None:
    stamps = _job()
    genuine = [s for n, s in enumerate(stamps) if n != where]
    stamps[where] = Y9999
    got = moments(stamps, NOW)
    assert (got[0], got[-1]) == (genuine[0], genuine[-1])
    assert all(g is not None and genuine[0] <= g <= genuine[-1] for g in got)
    # it counts at the moment of the line before it (the first line: the job's start)
    assert got[where] == (got[where - 1] if where else genuine[0])


def test_a_day_past_the_readers_clock_is_the_bound_for_a_moment() -> None:
    # another machine's clock a few hours ahead (or a zone slip): still moments of the job
    ahead = [NOW + 3 * 3600 + 10 * i for i in range(3)]
    assert moments(ahead, NOW) == ahead
    assert moments([NOW - 10, NOW + MAX_AHEAD_S + 1], NOW) == [NOW - 10, NOW - 10]


HOUR, DECADE = 3600.0, 10 * 365 * 86400.0


@pytest.mark.parametrize(("where", "stray", "starts_at"), [
    (2, +HOUR, 0), (6, +HOUR, 0),   # a line an hour ahead of the lines after it: not the end
    (3, -DECADE, 0), (7, -DECADE, 0),  # a line ten years behind the lines before it: not the start
    (0, +HOUR, 1),                  # the first line ahead of all the rest: the job starts at the next one
])
def test_one_line_stamped_out_of_the_logs_order_does_not_stretch_the_jobs_span(
        where: int, stray: float, starts_at: int) -> None:
    genuine = _job(8)
    stamps = list(genuine)
    stamps[where] += stray
    got = moments(stamps, NOW)
    ends_at = -2 if where == 7 else -1  # the last line ten years behind: the job ends at the one before
    assert (got[0], got[-1]) == (genuine[starts_at], genuine[ends_at]), got
    assert all(a <= b for a, b in zip(got, got[1:], strict=False))  # never back


def test_the_first_line_far_behind_the_rest_is_in_order_and_starts_the_job() -> None:
    stamps = [NOW - DECADE, *_job(4)]  # no stamp says it is wrong: a job that began long ago looks the same
    assert moments(stamps, NOW) == stamps


def test_the_last_line_an_hour_ahead_is_the_end_while_no_line_says_otherwise() -> None:
    stamps = _job(4)
    stamps[-1] = stamps[-1] + 3600  # in order: a job that waited an hour looks the same
    assert moments(stamps, NOW)[-1] == stamps[-1]


def test_a_clock_set_back_for_good_keeps_the_longer_part_and_never_goes_back() -> None:
    before, after = [NOW - 3600 + i for i in range(3)], [NOW - 7200 + i for i in range(6)]
    got = moments([*before, *after], NOW)
    assert (got[0], got[-1]) == (after[0], after[-1]) and all(a <= b for a, b in zip(got, got[1:], strict=False))


def test_a_live_view_line_by_line_never_goes_back_and_takes_no_stamp_past_tomorrow() -> None:
    assert next_moment(None, NOW - 5, NOW) == NOW - 5
    assert next_moment(NOW - 5, NOW - 50, NOW) == NOW - 5
    assert next_moment(NOW - 5, Y9999, NOW) == NOW - 5 and next_moment(None, Y9999, NOW) is None
    assert next_moment(NOW - 5, None, NOW) is None


def test_the_span_takes_the_last_line_of_any_type_only_when_it_is_a_moment_after_the_last_event() -> None:
    assert span(NOW - 60, NOW - 10, NOW - 5, NOW) == (NOW - 60, NOW - 5)  # a run's usage line after the last event
    assert span(NOW - 60, NOW - 10, Y9999, NOW) == (NOW - 60, NOW - 10)
    assert span(NOW - 60, NOW - 10, NOW - 3000, NOW) == (NOW - 60, NOW - 10)
    assert span(None, None, NOW - 5, NOW) == (NOW - 5, NOW - 5) and span(None, None, Y9999, NOW) == (None, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(min_value=0, max_value=Y9999)), max_size=40))
def test_any_stamps_give_moments_in_order_inside_the_sane_stamps_never_a_crash(stamps: list[float | None]) -> None:
    got = moments(stamps, NOW)
    assert len(got) == len(stamps)
    placed = [g for g in got if g is not None]
    assert all(a <= b for a, b in zip(placed, placed[1:], strict=False))
    sane = [s for s in stamps if s is not None and s <= NOW + MAX_AHEAD_S]
    assert all(min(sane) <= g <= max(sane) for g in placed)
    assert [g is None for g in got] == [s is None or not sane for s in stamps]
