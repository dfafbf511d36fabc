"""The coordinator lease (processor/coordinator/lease.py): its decision over every case, and its
renewal's handling of a failed commit."""

from __future__ import annotations

import itertools
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.config import Settings
from processor.coordinator.lease import (
    EXPIRE_S,
    CoordinatorConflict,
    CoordinatorLease,
    Seen,
    acquire_waiting,
    conflict_line,
    decide,
)
from processor.models.control import Lease, decode, encode


def test_no_other_coordinator_or_an_expired_lease_is_taken_at_once() -> None:
    assert decide(None, False, 0.0) == "take"
    assert decide(Seen("old", EXPIRE_S), False, 0.0) == "take"
    assert decide(Seen("old", EXPIRE_S * 10), True, 0.0) == "take"  # its renewals are stale


def test_a_recent_lease_is_watched_until_it_expires() -> None:
    seen = Seen("other", 0.4)
    assert decide(seen, False, 0.0) == "watch"
    assert decide(seen, False, EXPIRE_S - 0.01) == "watch"
    assert decide(seen, False, EXPIRE_S) == "take"  # dead or hung: fenced by the take-over


def test_a_renewal_while_watching_is_a_live_coordinator() -> None:
    assert decide(Seen("other", 0.4), True, 0.2) == "conflict"


@pytest.mark.parametrize(
    ("age", "renewed", "watched"),
    list(itertools.product([0.0, 1.0, EXPIRE_S - 0.1, EXPIRE_S], [False, True], [0.0, 2.0, 9.9])),
)
def test_every_case_ends_in_one_of_three_and_never_takes_a_live_lease(
    age: float, renewed: bool, watched: float
) -> None:
    verdict = decide(Seen("other", age), renewed, watched)
    assert verdict in ("take", "watch", "conflict")
    if age < EXPIRE_S and renewed:
        assert verdict == "conflict"


def test_the_lines_name_the_job_and_the_fix() -> None:
    line = conflict_line("orders", "abc123", fenced=False)
    assert "job orders already has a running coordinator (incarnation abc123" in line
    assert "PROCESSOR_JOB_NAME" in line and "\n" not in line
    assert "took over (this one was fenced)" in conflict_line("orders", "", fenced=True)


def test_lease_messages_round_trip() -> None:
    lease = Lease("abc", 1_796_000_000.25)
    assert decode(encode(lease)) == lease
    assert decode(b'{"kind":"lease","incarnation":"abc","renewed_at":"now"}') is None


class _ScriptedProducer:
    """A transactional producer whose commits fail as scripted (None: it succeeds)."""

    def __init__(self, commits: list[KafkaError | None]) -> None:
        self.commits = commits
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, value: bytes) -> None:
        self.calls.append("produce")

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        error = self.commits.pop(0)
        if error is not None:
            raise KafkaException(error)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


def _lease(producer: _ScriptedProducer) -> CoordinatorLease:
    lease = CoordinatorLease.__new__(CoordinatorLease)
    lease._settings = Settings(job_name="wc")
    lease.incarnation = "c1"
    lease.lost = threading.Event()
    lease.reason = ""
    lease._producer = producer  # type: ignore[assignment]
    lease._committing = False
    return lease


def test_a_commit_that_timed_out_is_committed_again_not_aborted() -> None:
    """librdkafka wants a retriable commit failure retried: an abort or a new transaction
    would get _CONFLICT for ever (the lease then never renewed again)."""
    timed_out = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    producer = _ScriptedProducer([timed_out, timed_out, None, None])
    lease = _lease(producer)
    for _ in range(4):
        lease._renew()
    assert producer.calls == [
        "begin", "produce", "commit",  # times out
        "commit",  # times out again
        "commit",  # done
        "begin", "produce", "commit",  # the next renewal
    ]  # fmt: skip
    assert not lease.lost.is_set()


def test_a_commit_that_must_be_aborted_is_aborted_and_a_fence_ends_the_lease() -> None:
    abortable = KafkaError(KafkaError._STATE, "abort it", txn_requires_abort=True)
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    producer = _ScriptedProducer([abortable, fenced])
    lease = _lease(producer)
    lease._renew()
    assert producer.calls[-1] == "abort" and not lease.lost.is_set()
    lease._renew()
    assert lease.lost.is_set() and "took over" in lease.reason


class _Flaky:
    """A lease whose ``acquire`` raises ``errors`` in turn, then takes the lease."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def acquire(self, stop: threading.Event) -> bool:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return True


def _timed_out() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermark offsets"))


def test_the_lease_is_taken_once_kafka_answers_again() -> None:
    """The 3-broker chaos run: a coordinator restarted while a broker was cut off timed out
    reading the control topic's end and exited; it waits for Kafka instead."""
    lease = _Flaky(_timed_out(), TimeoutError("no leader"), _timed_out())
    assert acquire_waiting(lease, Settings(), threading.Event(), max_delay_s=0.01)
    assert lease.calls == 4


@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True)),
        CoordinatorConflict("another coordinator of the job is alive"),
    ],
)
def test_a_fatal_error_or_a_live_coordinator_still_ends_it(error: BaseException) -> None:
    lease = _Flaky(error)
    with pytest.raises(type(error)):
        acquire_waiting(lease, Settings(), threading.Event(), max_delay_s=0.01)
    assert lease.calls == 1


def test_stopped_while_waiting_for_kafka_is_not_an_error() -> None:
    stop = threading.Event()
    stop.set()
    assert not acquire_waiting(_Flaky(_timed_out()), Settings(), stop)
