"""Turns at the repository's worktrees (core/supervisor/turns.py): one at a time, a launch the loop
announced before the poolings started after it, and a launch that finds the pool empty while a
pooling is under way waits for that pooling rather than make a new checkout of the repository."""

from __future__ import annotations

import threading

from pilothouse.core.supervisor.turns import Turns


def test_an_announced_launch_has_its_turn_before_a_pooling_started_after_it() -> None:
    turns, order = Turns(), []
    turns.expect_launch()
    turns.expect_pooling()

    def pool() -> None:
        with turns.pooling():
            order.append("pooling")

    pooling = threading.Thread(target=pool)
    pooling.start()  # it waits: the launch was announced first
    with turns.launch():
        order.append("launch")
    pooling.join(timeout=60)
    assert order == ["launch", "pooling"]


def test_a_launch_finding_the_pool_empty_waits_for_the_pooling_under_way() -> None:
    turns, pool, taken = Turns(), [], []
    turns.expect_pooling()
    turns.expect_launch()

    def launch() -> None:
        with turns.launch() as wait_for_pooling:
            wait_for_pooling(lambda: not pool)
            taken.append(list(pool))

    launching = threading.Thread(target=launch)
    launching.start()
    with turns.pooling():  # has its turn once the launch lets it go
        pool.append("a merged checkout")
    launching.join(timeout=60)
    assert taken == [["a merged checkout"]]


def test_a_launch_that_finds_a_pooled_checkout_does_not_wait_for_a_pooling() -> None:
    turns = Turns()
    turns.expect_pooling()
    with turns.launch(announced=False) as wait_for_pooling:
        wait_for_pooling(lambda: False)  # returns at once: there is one to take


def test_one_turn_at_a_time_whoever_asks() -> None:
    turns, inside, most = Turns(), [0], [0]
    lock = threading.Lock()

    def use(kind: str) -> None:
        for _ in range(50):
            turn = turns.pooling() if kind == "pooling" else turns.launch(announced=False) if kind == "launch" else turns
            with turn:
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                with lock:
                    inside[0] -= 1

    for _ in range(50):
        turns.expect_pooling()
    threads = [threading.Thread(target=use, args=(k,)) for k in ("pooling", "launch", "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert most[0] == 1 and not any(t.is_alive() for t in threads)
