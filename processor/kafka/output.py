"""A task's transactional producer: output of one epoch plus its input positions, atomically.

The ``transactional.id`` is stable per task, so whoever starts the task next fences the
previous incarnation (a zombie can no longer commit) and aborts its open transaction.
Any transactional error ends the task: it is restarted from its last committed transaction,
which is the one obviously correct answer to ambiguous results (commit may or may not have
happened: the restart reads back what did).

The round trips that close a transaction (send the offsets, commit) run on a background
thread (`SerialCalls`), in order and each under a deadline, so that the task keeps processing
the next epoch while they are in flight; writing into the next transaction waits for them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, NoReturn

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from processor.config import Settings
from processor.kafka import clients
from processor.kafka.serial import SerialCalls
from processor.models.records import Headers

# A sink's records: ``(key, value)``, or ``(key, value, headers)`` for a sink with headers
# (`processor.api.sinks`); one kind per list.
Headed = tuple[bytes | None, bytes, list[tuple[str, bytes]]]
SinkRecords = list[tuple[bytes | None, bytes]] | list[Headed]

# A loopback or LAN broker answers in milliseconds; a coordinator that moved answers within
# seconds. Longer than this, the call is one of librdkafka's hangs: restart the task.
SEND_OFFSETS_TIMEOUT_S = 10.0
# Marks the (aborted, empty) records of `abort_leftovers` for read_uncommitted readers.
_LEFTOVERS: list[tuple[str, str | bytes | None]] = [("processor.leftovers", b"")]


class TransactionalOutput:
    transactional = True

    def __init__(self, settings: Settings, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._producer: Producer = self._make_producer(settings)
        self._calls = SerialCalls(f"txn-{transactional_id}")
        self._open = False
        self._commit_s = 0.0

    def _make_producer(self, settings: Settings) -> Producer:
        return clients.producer(
            settings,
            **{
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": settings.transaction_timeout_ms,
            },
        )

    def init(self, timeout: float = 60) -> None:
        """Fence earlier incarnations and abort whatever they left open."""
        self._calls.submit(
            "init_transactions", timeout, lambda: self._producer.init_transactions(timeout)
        )
        self._calls.settle()

    def abort_leftovers(
        self, outputs: list[TopicPartition], consumer: Consumer, inputs: list[TopicPartition]
    ) -> None:
        """Abort whatever an earlier incarnation left *unmarked* in the task's partitions.

        ``init_transactions`` completes every earlier transaction of this id, but completing
        one does not always mean its markers were written: on a graceful restart of a
        single-broker cluster the transaction coordinator can complete a commit while the
        partitions have no leader, skip their markers, and leave the data and the offset
        commit of that transaction open in the logs (seen in the chaos run). The next marker
        this producer writes into such a partition closes them: a commit would commit them
        too, after the task has replayed that very epoch from its older stable offsets
        (duplicates). So, before anything else, one transaction touches every partition the
        task writes to and the group's offsets of its inputs, and is aborted: whatever was
        left open there is aborted with it, consistent with the offsets the task resumes from.
        Its records are empty, aborted, and never seen by read_committed readers.
        """

        def abort() -> None:
            producer = self._producer
            producer.begin_transaction()
            for tp in outputs:
                producer.produce(tp.topic, b"", partition=tp.partition, headers=_LEFTOVERS)
            if inputs:
                producer.send_offsets_to_transaction(
                    [TopicPartition(tp.topic, tp.partition, 0) for tp in inputs],
                    consumer.consumer_group_metadata(),
                    SEND_OFFSETS_TIMEOUT_S,
                )
            # Delivered before the abort: only a partition that got a record of this
            # transaction gets its abort marker, and a record purged unsent would leave a gap
            # in the idempotent producer's sequence numbers (OUT_OF_ORDER_SEQUENCE_NUMBER on
            # the next transaction).
            left = producer.flush(60)
            if left:
                raise RuntimeError(f"{left} records of the leftovers' abort not delivered in 60s")
            producer.abort_transaction(60)

        self._calls.submit("abort_leftovers", 120 + SEND_OFFSETS_TIMEOUT_S, abort)
        self._calls.settle()

    def _begin(self) -> None:
        # The previous transaction's commit may still be in flight.
        self._calls.settle()
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
            except KafkaException as exc:
                self._explain(exc)

    def produce_many(self, topic: str, items: SinkRecords) -> None:
        """Records partitioned by key (the hot path: no per-record keyword dicts); a list of
        ``(key, value, headers)`` (a sink with headers) goes through `_produce_headed`."""
        if not items:
            return
        if not self._open:
            self._begin()
        if len(items[0]) == 3:
            self._produce_headed(topic, items)
            return
        produce = self._producer.produce
        for key, value in items:
            try:
                produce(topic, value, key)
            except KafkaException as exc:
                self._explain(exc)
            except BufferError:
                self._producer.poll(0.05)
                while True:
                    try:
                        produce(topic, value, key)
                        break
                    except BufferError:
                        self._producer.poll(0.05)
        self._producer.poll(0)

    def _produce_headed(self, topic: str, items: Any) -> None:
        """`produce_many` of records with headers (an empty list: none): ``items`` is a
        list of `Headed`."""
        produce = self._producer.produce
        headers: Headers
        for key, value, headers in items:
            try:
                produce(topic, value, key, headers=headers)
            except KafkaException as exc:
                self._explain(exc)
            except BufferError:
                self.produce(topic, value, key, headers=headers)  # waits for room
        self._producer.poll(0)

    def _explain(self, exc: KafkaException) -> NoReturn:
        """A produce refused because the transaction left its state: a call in flight (the
        offsets sent into it) failed meanwhile. Raise that failure, which names the cause."""
        if exc.args and exc.args[0].code() == KafkaError._STATE:
            self._calls.settle()
        raise exc

    def send_offsets_async(
        self,
        offsets: list[TopicPartition],
        consumer: Consumer,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Queue the input positions into this transaction (committed with, and only with,
        its output); ``then`` runs right after they are in."""
        if not self._open:
            self._begin()
        metadata = consumer.consumer_group_metadata()

        def send() -> None:
            self._producer.send_offsets_to_transaction(offsets, metadata, SEND_OFFSETS_TIMEOUT_S)
            if then is not None:
                then()

        self._calls.submit("send_offsets_to_transaction", SEND_OFFSETS_TIMEOUT_S, send)

    def commit_async(self, timeout: float = 60) -> None:
        """Queue the commit of the open transaction; see `commit_finished`."""
        self._commit_s = 0.0
        if not self._open:
            return
        self._open = False

        def commit() -> None:
            started = time.monotonic()
            self._producer.commit_transaction(timeout)
            self._commit_s = time.monotonic() - started

        self._calls.submit("commit_transaction", timeout, commit)

    def commit_finished(self, block: bool) -> float | None:
        """The seconds the queued commit took once it succeeded, else None (``block``: wait).

        Raises what failed: the commit, or a call queued before it.
        """
        if block:
            self._calls.settle()
        elif not self._calls.poll():
            return None
        return self._commit_s

    def take_waited(self) -> float:
        """Seconds the caller spent waiting for queued calls since the last take."""
        waited, self._calls.waited_s = self._calls.waited_s, 0.0
        return waited

    def abort(self, timeout: float = 30) -> None:
        self._calls.settle()
        if self._open:
            self._open = False

            def abort() -> None:
                # Delivered first: records the abort purges unsent leave a gap in the
                # idempotent producer's sequence numbers, and the next transaction fails with
                # OUT_OF_ORDER_SEQUENCE_NUMBER (seen after a declined checkpoint).
                self._producer.flush(timeout)
                self._producer.abort_transaction(timeout)

            self._calls.submit("abort_transaction", 2 * timeout, abort)
            self._calls.settle()

    def close(self) -> None:
        # Closing after a failure: if the abort fails too, the next incarnation's
        # init_transactions (or the transaction timeout) aborts it.
        try:
            if self._calls.stuck:
                return  # a call is still blocked inside: leave the producer to the next fence
            with contextlib.suppress(Exception):
                self.abort(5)
            self._producer.flush(0)
        finally:
            self._calls.shutdown()


class AtLeastOnceOutput(TransactionalOutput):
    """``PROCESSOR_GUARANTEE=at_least_once``: no transactions. A checkpoint's "commit" waits
    until everything produced so far is acknowledged (idempotent producer: no duplicates from
    its own retries), then commits the input positions through the consumer. Nothing is
    fenced and nothing can be aborted: after a failure, what was produced since the last
    commit is produced again."""

    transactional = False

    def __init__(self, settings: Settings, transactional_id: str) -> None:
        self._failure: str | None = None
        self._offsets: tuple[list[TopicPartition], Consumer, Callable[[], None] | None] | None
        self._offsets = None
        self._committing: tuple[list[TopicPartition], Consumer, Callable[[], None] | None] | None
        self._committing = None
        self._flush_started = 0.0
        super().__init__(settings, transactional_id)

    def _make_producer(self, settings: Settings) -> Producer:
        return clients.producer(
            settings,
            **{
                "enable.idempotence": True,
                # Only failed deliveries call back: one Python call per lost record, not per record.
                "delivery.report.only.error": True,
                "on_delivery": self._delivered,
            },
        )

    def _delivered(self, err: KafkaError | None, msg: object) -> None:
        if err is not None and self._failure is None:
            self._failure = f"a record was not delivered: {err}"

    def init(self, timeout: float = 60) -> None:
        pass  # nothing to fence

    def abort_leftovers(
        self, outputs: list[TopicPartition], consumer: Consumer, inputs: list[TopicPartition]
    ) -> None:
        pass  # no transactions, nothing left open

    def _begin(self) -> None:
        self._calls.settle()
        self._open = True

    def send_offsets_async(
        self,
        offsets: list[TopicPartition],
        consumer: Consumer,
        then: Callable[[], None] | None = None,
    ) -> None:
        if not self._open:
            self._begin()
        self._offsets = (offsets, consumer, then)

    def commit_async(self, timeout: float = 60) -> None:
        self._commit_s = 0.0
        self._committing = None
        if not self._open:
            return
        self._open = False
        self._committing, self._offsets = self._offsets, None
        self._flush_started = time.monotonic()

        def flush() -> None:
            left = self._producer.flush(timeout)
            if left or self._failure is not None:
                raise RuntimeError(self._failure or f"{left} records not delivered in {timeout}s")

        self._calls.submit("flush", timeout, flush)

    def commit_finished(self, block: bool) -> float | None:
        # The positions go in from the task's own thread: a consumer is not to be shared.
        if super().commit_finished(block) is None:
            return None
        pending, self._committing = self._committing, None
        if pending is not None:
            offsets, consumer, then = pending
            consumer.commit(offsets=offsets, asynchronous=False)
            if then is not None:
                then()
            self._commit_s = time.monotonic() - self._flush_started
        return self._commit_s

    def abort(self, timeout: float = 30) -> None:
        # What was produced is out already: it stays (at least once).
        self._calls.settle()
        self._open = False
        self._offsets = self._committing = None


def open_output(settings: Settings, transactional_id: str) -> TransactionalOutput:
    """The task's output for the job's guarantee."""
    if settings.guarantee == "at_least_once":
        return AtLeastOnceOutput(settings, transactional_id)
    return TransactionalOutput(settings, transactional_id)
