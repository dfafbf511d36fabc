"""The purger's decisions: when to purge a shuffle partition, to where, and how loudly to fail."""

from __future__ import annotations

from processor.kafka.purge import ErrorThrottle, PurgeSchedule


def test_first_offer_purges_at_once_then_at_most_once_per_interval() -> None:
    s = PurgeSchedule(interval_s=30)
    assert s.start(100, now=0.0) == 100
    s.finished(100)
    assert s.start(200, now=10.0) is None  # within the interval
    assert not s.due(29.9)
    assert s.due(30.0)
    assert s.start(200, now=30.0) == 200


def test_one_request_in_flight_per_partition() -> None:
    s = PurgeSchedule(interval_s=0)
    assert s.start(100, now=0.0) == 100
    assert not s.due(5.0)
    assert s.start(150, now=5.0) is None
    s.finished(100)
    assert s.start(150, now=5.0) == 150


def test_never_purges_again_below_what_is_gone() -> None:
    s = PurgeSchedule(interval_s=0)
    assert s.start(100, now=0.0) == 100
    s.finished(100)
    assert s.start(100, now=1.0) is None
    assert s.start(40, now=2.0) is None  # an older snapshot's offset after a fallback


def test_purges_exactly_the_offset_given() -> None:
    # Never above it: the offer is the bound, whatever was offered before.
    s = PurgeSchedule(interval_s=0)
    assert s.start(500, now=0.0) == 500
    s.failed()
    assert s.start(300, now=1.0) == 300


def test_the_broker_can_report_a_log_start_above_the_offer() -> None:
    # Retention (or another purge) moved it further: nothing below it is worth a request.
    s = PurgeSchedule(interval_s=0)
    assert s.start(100, now=0.0) == 100
    s.finished(250)
    assert s.purged == 250
    assert s.start(200, now=1.0) is None
    assert s.start(300, now=1.0) == 300


def test_failure_is_retried_after_the_interval() -> None:
    s = PurgeSchedule(interval_s=30)
    assert s.start(100, now=0.0) == 100
    s.failed()
    assert s.start(100, now=1.0) is None
    assert s.start(100, now=30.0) == 100


def test_errors_logged_at_most_once_per_period_with_the_count_held_back() -> None:
    t = ErrorThrottle(period=60)
    assert t.admit(0.0) == 0
    assert t.admit(1.0) is None
    assert t.admit(59.0) is None
    assert t.admit(60.0) == 2
    assert t.admit(61.0) is None
    assert t.admit(200.0) == 1
