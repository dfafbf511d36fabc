"""A task's transactional producer: output of one epoch plus its input positions, atomically.

The ``transactional.id`` is stable per task, so whoever starts the task next fences the
previous incarnation (a zombie can no longer commit) and aborts its open transaction.
Any transactional error ends the task: it is restarted from its last committed transaction,
which is the one obviously correct answer to ambiguous results (commit may or may not have
happened: the restart reads back what did).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from processor.config import Settings
from processor.kafka import clients
from processor.models.records import Headers


class TransactionalOutput:
    def __init__(self, settings: Settings, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._producer: Producer = clients.producer(
            settings,
            **{
                "transactional.id": transactional_id,
                "transaction.timeout.ms": settings.transaction_timeout_ms,
            },
        )
        self._open = False
        self.produced = 0  # records in the open transaction

    def init(self, timeout: float = 60) -> None:
        """Fence earlier incarnations and abort whatever they left open."""
        self._producer.init_transactions(timeout)

    @property
    def in_transaction(self) -> bool:
        return self._open

    def _begin(self) -> None:
        self._producer.begin_transaction()
        self._open = True
        self.produced = 0

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        if not self._open:
            self._begin()
        kwargs: dict[str, Any] = {"key": key}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, value, **kwargs)
                break
            except BufferError:
                # The local queue is full: let librdkafka send, then retry this record.
                self._producer.poll(0.05)
        self.produced += 1

    def produce_many(self, topic: str, items: list[tuple[bytes, bytes]]) -> None:
        """Keyed records, partitioned by key (the hot path: no per-record keyword dicts)."""
        if not items:
            return
        if not self._open:
            self._begin()
        produce = self._producer.produce
        for key, value in items:
            try:
                produce(topic, value, key)
            except BufferError:
                self._producer.poll(0.05)
                while True:
                    try:
                        produce(topic, value, key)
                        break
                    except BufferError:
                        self._producer.poll(0.05)
        self.produced += len(items)
        self._producer.poll(0)

    def send_offsets(self, offsets: list[TopicPartition], consumer: Consumer) -> None:
        """Input positions, committed with (and only with) this transaction's output."""
        if not self._open:
            self._begin()
        self._producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)

    def commit(self, timeout: float = 60) -> float:
        """Commit the open transaction; returns the seconds it took."""
        started = time.monotonic()
        if self._open:
            self._producer.commit_transaction(timeout)
            self._open = False
        return time.monotonic() - started

    def abort(self, timeout: float = 30) -> None:
        if self._open:
            self._open = False
            self._producer.abort_transaction(timeout)

    def close(self) -> None:
        # Closing after a failure: if the abort fails too, the next incarnation's
        # init_transactions (or the transaction timeout) aborts it.
        with contextlib.suppress(Exception):
            self.abort(5)
        self._producer.flush(0)
