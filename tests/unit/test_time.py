"""Watermarks at a source (partitions, out-of-orderness, idleness) and at a task (channels)."""

from __future__ import annotations

import random

import pytest

from processor.pipeline.time import NO_WATERMARK, ChannelWatermarks, SourceWatermarks


def test_source_watermark_is_the_slowest_partitions_newest_time_less_the_bound() -> None:
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=100, idle_ms=1000, now=0.0)
    assert marks.current(0.0) == NO_WATERMARK - 100  # partition 1 has said nothing yet
    marks.observe(0, 5000, 0.1)
    marks.observe(1, 3000, 0.1)
    assert marks.current(0.2) == 2900
    marks.observe(1, 2000, 0.3)  # older than what it saw: the bound does not go back
    assert marks.current(0.3) == 2900


def test_an_idle_partition_stops_holding_the_source_back() -> None:
    marks = SourceWatermarks([0, 1], out_of_orderness_ms=0, idle_ms=1000, now=0.0)
    marks.observe(0, 5000, 0.5)
    assert marks.current(0.9) == NO_WATERMARK  # partition 1: silent, but not for 1 s yet
    assert marks.current(1.0) == 5000  # now idle
    assert marks.current(1.6) is None  # both idle
    marks.observe(1, 7000, 1.7)
    assert marks.current(1.7) == 7000


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
    """Against a direct definition: max over time of min over non-idle channels' max."""
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
        idle[c] = is_idle
        if not is_idle:
            best[c] = max(best[c], t)
        active = [b for b, i in zip(best, idle, strict=True) if not i]
        before = expected
        if active:
            expected = max(expected, min(active))
        assert marks.current == expected
        assert risen == (expected if expected > before else None)
