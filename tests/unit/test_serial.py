"""SerialCalls: the background queue a task's transactional round trips run on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from processor.kafka.serial import CallStuck, EarlierCallFailed, SerialCalls


@pytest.fixture
def calls() -> Iterator[SerialCalls]:
    queue = SerialCalls("test", grace=0.0)
    yield queue
    queue.shutdown()


def test_calls_run_in_order_and_settle_collects_them(calls: SerialCalls) -> None:
    ran: list[int] = []
    for i in range(5):
        calls.submit(f"call {i}", 5, lambda i=i: ran.append(i))  # type: ignore[misc]
    assert calls.pending
    calls.settle()
    assert ran == [0, 1, 2, 3, 4]
    assert not calls.pending
    assert calls.poll()


def test_settle_on_an_empty_queue_returns_at_once(calls: SerialCalls) -> None:
    calls.settle()
    assert calls.poll()
    assert calls.waited_s == 0.0


def test_poll_is_false_while_a_call_runs_and_true_once_it_is_done(calls: SerialCalls) -> None:
    release = threading.Event()
    calls.submit("slow", 5, release.wait)
    assert not calls.poll()
    assert calls.pending
    release.set()
    deadline = time.monotonic() + 5
    while not calls.poll():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert not calls.pending


def test_a_failure_is_raised_and_every_later_call_is_skipped(calls: SerialCalls) -> None:
    ran: list[str] = []

    def fail() -> None:
        raise ValueError("offsets refused")

    calls.submit("send offsets", 5, fail)
    calls.submit("commit", 5, lambda: ran.append("commit"))
    with pytest.raises(ValueError, match="offsets refused"):
        calls.settle()
    with pytest.raises(EarlierCallFailed, match="commit of test skipped"):
        calls.settle()
    calls.submit("abort", 5, lambda: ran.append("abort"))
    with pytest.raises(EarlierCallFailed):
        calls.settle()
    assert ran == []  # a commit after failed offsets would commit output without its positions


def test_poll_raises_the_failure_too(calls: SerialCalls) -> None:
    def fail() -> None:
        raise RuntimeError("fenced")

    calls.submit("commit", 5, fail)
    deadline = time.monotonic() + 5
    with pytest.raises(RuntimeError, match="fenced"):
        while not calls.poll():
            assert time.monotonic() < deadline
            time.sleep(0.001)


def test_a_call_past_its_deadline_makes_the_queue_stuck(calls: SerialCalls) -> None:
    release = threading.Event()
    try:
        calls.submit("commit_transaction", 0.05, release.wait)
        started = time.monotonic()
        with pytest.raises(CallStuck, match="commit_transaction of test did not return"):
            calls.settle()
        assert time.monotonic() - started < 5
        assert calls.stuck
        with pytest.raises(CallStuck):
            calls.poll()
    finally:
        release.set()


def test_the_deadline_counts_from_when_a_call_starts_not_when_it_is_queued(
    calls: SerialCalls,
) -> None:
    calls.submit("first", 5, lambda: time.sleep(0.2))
    calls.submit("second", 0.1, lambda: time.sleep(0.05))  # queued 0.2 s: not stuck
    calls.settle()
    assert not calls.stuck


def test_waited_s_is_the_time_callers_spent_in_settle(calls: SerialCalls) -> None:
    calls.submit("slow", 5, lambda: time.sleep(0.1))
    calls.settle()
    assert 0.05 < calls.waited_s < 5
