"""A task's transactional producer: output of one epoch plus its input positions, atomically.

The ``transactional.id`` is stable per task, so whoever starts the task next fences the
previous incarnation (a zombie can no longer commit) and aborts its open transaction.
Any transactional error ends the task: it is restarted from its last committed transaction,
which is the one obviously correct answer to ambiguous results (commit may or may not have
happened: the restart reads back what did).

A transactional call that does not return is an error too. librdkafka can block in
``send_offsets_to_transaction`` past its timeout when the group coordinator goes away
(librdkafka#5456, #5511; seen here after a broker restart), so every such call runs under
a deadline of our own; past it the task fails, its successor fences this producer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition

from processor.config import Settings
from processor.kafka import clients
from processor.models.records import Headers

T = TypeVar("T")

_GRACE_S = 5.0  # on top of the call's own timeout
# A loopback or LAN broker answers in milliseconds; a coordinator that moved answers within
# seconds. Longer than this, the call is one of librdkafka's hangs: restart the task.
SEND_OFFSETS_TIMEOUT_S = 10.0


class TransactionStuck(RuntimeError):
    """A transactional call outlived its deadline: the producer cannot be trusted any more."""


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
        self._stuck = False

    def _deadline(self, what: str, timeout: float, call: Callable[[], T]) -> T:
        """Run a blocking transactional call, giving up after its timeout plus a grace."""
        outcome: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                outcome.append(call())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failure.append(exc)

        thread = threading.Thread(target=run, name=f"{self.transactional_id}:{what}", daemon=True)
        thread.start()
        thread.join(timeout + _GRACE_S)
        if thread.is_alive():
            self._stuck = True
            raise TransactionStuck(
                f"{what} of {self.transactional_id} did not return within {timeout + _GRACE_S:.0f}s"
            )
        if failure:
            raise failure[0]
        return outcome[0]

    def init(self, timeout: float = 60) -> None:
        """Fence earlier incarnations and abort whatever they left open."""
        self._deadline(
            "init_transactions", timeout, lambda: self._producer.init_transactions(timeout)
        )

    def _begin(self) -> None:
        self._producer.begin_transaction()
        self._open = True

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
        self._producer.poll(0)

    def send_offsets(self, offsets: list[TopicPartition], consumer: Consumer) -> None:
        """Input positions, committed with (and only with) this transaction's output."""
        if not self._open:
            self._begin()
        metadata = consumer.consumer_group_metadata()
        self._deadline(
            "send_offsets_to_transaction",
            SEND_OFFSETS_TIMEOUT_S,
            lambda: self._producer.send_offsets_to_transaction(
                offsets, metadata, SEND_OFFSETS_TIMEOUT_S
            ),
        )

    def commit(self, timeout: float = 60) -> float:
        """Commit the open transaction; returns the seconds it took."""
        started = time.monotonic()
        if self._open:
            self._deadline(
                "commit_transaction", timeout, lambda: self._producer.commit_transaction(timeout)
            )
            self._open = False
        return time.monotonic() - started

    def abort(self, timeout: float = 30) -> None:
        if self._open:
            self._open = False
            self._deadline(
                "abort_transaction", timeout, lambda: self._producer.abort_transaction(timeout)
            )

    def close(self) -> None:
        # Closing after a failure: if the abort fails too, the next incarnation's
        # init_transactions (or the transaction timeout) aborts it.
        if self._stuck:
            return  # a call is still blocked inside: leave the producer to its successor's fence
        with contextlib.suppress(Exception):
            self.abort(5)
        self._producer.flush(0)
