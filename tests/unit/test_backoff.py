"""`processor.backoff.doubling`: the delays of a wait for Kafka."""

from __future__ import annotations

import itertools

from processor.backoff import doubling


def test_doubling_delays_stop_growing_at_the_maximum() -> None:
    assert list(itertools.islice(doubling(), 8)) == [0.5, 1, 2, 4, 8, 10, 10, 10]


def test_a_maximum_below_the_first_delay_is_every_delay() -> None:
    assert list(itertools.islice(doubling(initial_s=0.5, max_s=0.2), 3)) == [0.2, 0.2, 0.2]
    assert list(itertools.islice(doubling(initial_s=3, max_s=20), 5)) == [3, 6, 12, 20, 20]
