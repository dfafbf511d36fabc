"""`processor.commands.counts.read_records`: each offset once, whatever the consumer does."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from processor.commands import counts
from processor.config import Settings
from processor.kafka import clients


class _Message:
    def __init__(self, partition: int, offset: int, value: bytes) -> None:
        self._partition, self._offset, self._value = partition, offset, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value


class _Refetching:
    """A consumer of one partition of 4 records that, as after a leader change, hands out
    offsets 1 and 2 a second time."""

    def __init__(self) -> None:
        self.batches = [[0, 1, 2], [1, 2, 3]]
        self.at = 0

    def consume(self, count: int, timeout: float) -> list[_Message]:
        if not self.batches:
            return []
        offsets = self.batches.pop(0)
        self.at = offsets[-1] + 1
        return [_Message(0, o, b"%d" % o) for o in offsets]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        pass

    def close(self) -> None:
        pass


def test_an_offset_fetched_again_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer may hand out offsets again (a leader change, a reset): the verifier's
    reader keeps each once, so what it checks is the log, not the consumer's deliveries."""
    consumer = _Refetching()

    def make(settings: Settings, **config: Any) -> _Refetching:
        return consumer

    monkeypatch.setattr(clients, "consumer", make)
    monkeypatch.setattr(clients, "topic_partitions", lambda *args, **kwargs: 1)
    monkeypatch.setattr(clients, "watermark_offsets", lambda *args, **kwargs: (0, 4))
    records = counts.read_records(Settings(), "t", timeout=5)
    assert [value for _, value in records] == [b"0", b"1", b"2", b"3"]
