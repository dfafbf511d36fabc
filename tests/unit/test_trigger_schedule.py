"""`processor.checkpointing.schedule.TriggerSchedule`: the effective checkpoint interval is the
longer of the configured one and a checkpoint's duration, as Flink's with one at a time."""

from __future__ import annotations

import itertools

import pytest

from processor.checkpointing.schedule import TriggerSchedule


def _run(durations: list[float], interval_s: float = 1.0, tick: float = 0.05) -> list[float]:
    """The trigger times of a coordinator loop ticking every ``tick`` s whose checkpoints
    take ``durations`` in turn; also checks that a pending checkpoint's trigger is sent
    again every interval and only while it is pending."""
    schedule = TriggerSchedule(interval_s, next_trigger=0.0)
    triggers: list[float] = []
    done_at: float | None = None
    resent: list[float] = []
    for step in itertools.count():
        now = round(step * tick, 6)
        if len(triggers) == len(durations) and (done_at is None or now >= done_at):
            break
        if done_at is not None and now >= done_at:
            done_at = None
        if schedule.resend_due(now, pending=done_at is not None):
            assert done_at is not None
            resent.append(now)
        if schedule.trigger_due(now) and done_at is None and len(triggers) < len(durations):
            triggers.append(now)
            done_at = now + durations[len(triggers) - 1]
            schedule.triggered(now)
    for at in resent:  # an interval after its trigger or its last resend
        last = max(t for t in triggers + resent if t < at)
        assert at - last == pytest.approx(interval_s, abs=tick)
    return triggers


def test_checkpoints_faster_than_the_interval_go_out_every_interval() -> None:
    assert _run([0.3] * 5) == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])


def test_a_slower_checkpoint_is_followed_at_once_not_at_the_next_whole_interval() -> None:
    # 1.2 s, then 2.3 s: the next ones go out as they complete (1.2, then 3.5), not at 2.0 and
    # 4.0 (the next whole interval, which made an epoch of 2-3 s out of 1.2-2.3 s).
    triggers = _run([1.2, 2.3, 0.2, 0.2])
    assert triggers == pytest.approx([0.0, 1.2, 3.5, 4.5])


def test_a_pending_checkpoints_trigger_is_sent_again_every_interval() -> None:
    schedule = TriggerSchedule(1.0, next_trigger=0.0)
    schedule.triggered(0.0)
    assert not schedule.resend_due(0.9, pending=True)
    assert schedule.resend_due(1.0, pending=True)
    assert not schedule.resend_due(1.5, pending=True)
    assert schedule.resend_due(2.0, pending=True)
    assert not schedule.resend_due(5.0, pending=False)
    assert schedule.trigger_due(2.0)  # due since 1.0, waiting for the pending one
