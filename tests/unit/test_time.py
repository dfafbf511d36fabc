"""Watermarks at a source (partitions, out-of-orderness, idleness) and at a task (channels)."""

from __future__ import annotations

import random

import pytest

from processor.engine.time import (
    END_OF_TIME,
    NO_WATERMARK,
    READ_GAP_S,
    ChannelWatermarks,
    SourceWatermarks,
    source_marks,
)


def test_source_watermark_is_the_slowest_partitions_newest_time_less_the_bound() -> None:
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=100, idle_ms=1000)
    assert marks.current() == NO_WATERMARK - 100  # partition 1 has said nothing yet
    marks.observe(0, 5000)
    marks.observe(1, 3000)
    assert marks.current() == 2900
    marks.observe(1, 2000)  # older than what it saw: the bound does not go back
    assert marks.current() == 2900


def _read(marks: SourceWatermarks, start: float, end: float) -> None:
    """Reads every 50 ms from ``start`` to ``end``, finding nothing."""
    for i in range(round((end - start) / 0.05) + 1):
        marks.polled(start + i * 0.05)


def test_an_idle_partition_stops_holding_the_source_back() -> None:
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=0, idle_ms=1000)
    _read(marks, 0.0, 0.5)
    marks.observe(0, 5000)
    _read(marks, 0.55, 0.9)
    assert marks.current() == NO_WATERMARK  # partition 1: silent, but not for 1 s yet
    _read(marks, 0.95, 1.0)
    assert marks.current() == 5000  # now idle
    _read(marks, 1.05, 1.6)
    assert marks.current() is None  # both idle
    marks.polled(1.7)
    marks.observe(1, 7000)
    assert marks.current() == 7000


def test_only_time_spent_reading_makes_a_partition_idle() -> None:
    """Time the task did not read (a restore, a commit waited for, a stopped worker) is no
    sign that its partition has nothing: counted, it made a restored source task mark its
    partition idle at its first checkpoint, and the records it then read late downstream
    (the chained chaos run, issue #22)."""
    marks = SourceWatermarks([0], out_of_orderness_ms=0, idle_ms=1000)
    marks.polled(3.0)  # the first read, after a restore of 3 s
    assert marks.current() == NO_WATERMARK  # not idle: nothing said yet
    marks.observe(0, 5000)
    marks.polled(3.1)
    marks.polled(6.0)  # e.g. a commit waited for, or SIGSTOP: at most READ_GAP_S counts
    assert marks.current() == 5000
    _read(marks, 6.0, 6.0 + 1.0 - READ_GAP_S - 0.1 - 0.06)
    assert marks.current() == 5000
    _read(marks, 6.9, 7.2)  # a second of reading without a record: idle now
    assert marks.current() is None


def test_task_watermark_is_the_minimum_over_channels_and_never_goes_back() -> None:
    marks = ChannelWatermarks(3)
    assert marks.on_mark(0, 100, False) is None  # channels 1 and 2 hold it back
    assert marks.on_mark(1, 50, False) is None
    assert marks.on_mark(2, 70, False) == 50
    assert marks.on_mark(1, 200, False) == 70
    assert marks.on_mark(2, 60, False) is None  # a channel's watermark going back is ignored
    assert marks.current == 70


def test_idle_channels_do_not_hold_the_task_back_until_they_speak_again() -> None:
    marks = ChannelWatermarks(2)
    assert marks.on_mark(0, 100, False) is None
    assert marks.on_mark(1, NO_WATERMARK, True) == 100
    assert marks.on_mark(0, 300, False) == 300
    assert not marks.all_idle
    assert marks.on_mark(0, 300, True) is None  # everything idle: nothing moves
    assert marks.all_idle and marks.current == 300
    assert marks.on_mark(1, 250, False) is None  # active again, below: no going back
    assert marks.on_mark(0, 400, False) is None  # the minimum, 250, is below 300
    assert marks.on_mark(1, 500, False) == 400


def test_snapshot_round_trip_and_mismatched_channel_counts() -> None:
    marks = ChannelWatermarks(2)
    marks.on_mark(0, 10, False)
    marks.on_mark(1, 20, True)
    copy = ChannelWatermarks(2)
    copy.restore(marks.snapshot())
    assert copy.snapshot() == marks.snapshot()
    assert copy.on_mark(0, 30, False) == 30
    fresh = ChannelWatermarks(3)  # the stage was rescaled: channels start from nothing
    fresh.restore(marks.snapshot())
    assert fresh.on_mark(0, 5, False) is None
    empty = ChannelWatermarks(1)
    empty.restore({})
    assert empty.current == NO_WATERMARK


@pytest.mark.parametrize("seed", range(20))
def test_task_watermark_model(seed: int) -> None:
    """Against a direct definition: max over time of min over non-idle channels' max, an
    idle mark counting as a watermark of its channel just before the channel goes idle."""
    rng = random.Random(seed)
    channels = rng.randrange(1, 5)
    marks = ChannelWatermarks(channels)
    best = [NO_WATERMARK] * channels
    idle = [False] * channels
    expected = NO_WATERMARK
    for _ in range(200):
        c = rng.randrange(channels)
        is_idle = rng.random() < 0.2
        t = rng.randrange(1000)
        risen = marks.on_mark(c, t, is_idle)
        before = expected
        if t > best[c]:
            best[c], idle[c] = t, False
            expected = max(expected, min(b for b, i in zip(best, idle, strict=True) if not i))
        idle[c] = is_idle
        active = [b for b, i in zip(best, idle, strict=True) if not i]
        if active:
            expected = max(expected, min(active))
        assert marks.current == expected
        assert risen == (expected if expected > before else None)


def test_progress_is_the_watermark_as_if_no_partition_were_idle() -> None:
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=100, idle_ms=1000)
    marks.polled(0.0)
    marks.observe(0, 5000)
    marks.observe(1, 3000)
    _read(marks, 0.05, 1.2)
    assert marks.current() is None
    assert marks.progress() == 2900  # what an idle mark must not lose (the source sends it)


def test_an_idle_marks_time_counts_before_the_channel_goes_idle() -> None:
    """A keyed task whose channels all went idle in one epoch forwards a single idle mark
    with its risen watermark: downstream must take that time, or the windows it closes never
    close (the chained chaos run, failure-free, 200,000 clicks: 978 of 3,003 second-stage
    windows missing)."""
    marks = ChannelWatermarks(2)
    marks.on_mark(0, 50, False)
    assert marks.on_mark(1, 60, False) == 50
    assert marks.on_mark(0, 90, True) == 60  # channel 0 idle: channel 1 alone holds it
    assert marks.on_mark(1, 120, True) == 120  # its last progress, then idle
    assert marks.all_idle and marks.current == 120
    assert marks.on_mark(1, 100, True) is None  # an older time: nothing moves


def test_what_a_source_forwards_and_the_progress_before_an_idle_mark() -> None:
    """`source_marks` (the one place both task kinds' sources and the driver decide what to
    forward): nothing before every partition has a record, a new mark when it rises, none
    when unchanged, and on going idle first the watermark of what was read since (readers
    ignore an idle mark's time), then the idle mark."""
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=100, idle_ms=1000)
    marks.polled(0.0)
    marks.observe(0, 5_000)
    assert source_marks(marks, None) == []  # partition 1 has had no record
    marks.observe(1, 3_000)
    assert source_marks(marks, None) == [(2_900, False)]
    assert source_marks(marks, (2_900, False)) == []
    marks.observe(1, 4_000)  # read, but not forwarded before the partitions go quiet
    for step in range(1, 10):
        marks.polled(step * 0.25)
    assert marks.current() is None
    assert source_marks(marks, (2_900, False)) == [(3_900, False), (3_900, True)]
    assert source_marks(marks, (3_900, True)) == []
    assert source_marks(marks, (2_900, False), floor=10_000) == [(3_900, False), (3_900, True)]


def test_a_drained_source_ends_event_time_once_idle_or_not() -> None:
    """``--drain``: the end of time, not idle (it closes every window), sent once."""
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=0, idle_ms=1000)
    marks.observe(0, 5_000)
    assert source_marks(marks, (4_000, False), drained=True) == [(END_OF_TIME, False)]
    assert source_marks(marks, (END_OF_TIME, False), drained=True) == []
    assert source_marks(marks, None, drained=True) == [(END_OF_TIME, False)]
