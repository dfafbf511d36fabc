"""The keyed task's epoch writer (`processor.worker.keyed_epoch`): what an aborted transaction
carried goes out again first in the next one, barriers and watermarks never."""

from __future__ import annotations

from typing import Any, cast

from processor.engine.epoch import Drained
from processor.kafka.output import TransactionalOutput
from processor.models.records import control_kind
from processor.worker.deadletter import DeadLetters
from processor.worker.keyed_epoch import EpochWriter

LABELS = {"job_name": "j", "task": "count-0"}


class Recorded:
    """Stands in for `TransactionalOutput`: what was produced, in order."""

    transactional = True

    def __init__(self) -> None:
        self.records: list[tuple[str, int | None, Any]] = []

    def produce(
        self, topic: str, value: bytes, key: Any = None, partition: Any = None, headers: Any = None
    ) -> None:
        self.records.append((topic, partition, control_kind(headers) if headers else value))

    def produce_many(self, topic: str, items: list[Any]) -> None:
        self.records.extend((topic, None, v) for _, v, *_ in items)


def _writer() -> EpochWriter:
    dlq = DeadLetters("j.dlq", "count-0", LABELS, 1 << 20)
    return EpochWriter([("count", "j.shuffle", 2, 0)], None, None, dlq, LABELS)


def _drained(*values: bytes) -> Drained:
    return Drained(sinks={"out": [(None, v) for v in values]}, shuffled=[[(1, b"s")]])


def test_an_aborted_transactions_records_go_first_into_the_next() -> None:
    writer, out = _writer(), Recorded()
    assert writer.ship(cast(TransactionalOutput, out), _drained(b"a")) == 2
    writer.barriers(cast(TransactionalOutput, out), 1, 0)
    writer.aborted(transactional=True)
    again = Recorded()
    assert writer.ship(cast(TransactionalOutput, again), _drained(b"b")) == 4
    assert again.records == [
        ("out", None, b"a"),
        ("j.shuffle", 1, b"s"),
        ("out", None, b"b"),
        ("j.shuffle", 1, b"s"),
    ]


def test_a_committed_transaction_is_not_written_again() -> None:
    writer = _writer()
    writer.ship(cast(TransactionalOutput, Recorded()), _drained(b"a"))
    writer.committed()
    writer.aborted(transactional=True)  # the next transaction, empty, aborted
    again = Recorded()
    writer.ship(cast(TransactionalOutput, again), _drained(b"b"))
    assert [v for _, _, v in again.records] == [b"b", b"s"]


def test_barriers_and_marks_go_to_every_partition_of_each_shuffle() -> None:
    writer, out = _writer(), Recorded()
    writer.mark(cast(TransactionalOutput, out), (1000, False))
    writer.barriers(cast(TransactionalOutput, out), 7, 0)
    assert out.records == [
        ("j.shuffle", 0, "watermark"),
        ("j.shuffle", 1, "watermark"),
        ("j.shuffle", 0, "barrier"),
        ("j.shuffle", 1, "barrier"),
    ]
