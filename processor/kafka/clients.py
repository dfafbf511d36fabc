"""Kafka clients configured the same way everywhere: one place for librdkafka settings."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.config import Settings, SettingsError
from processor.kafka.replication import Replication
from processor.models import limits

T = TypeVar("T")

log = logging.getLogger(__name__)
# librdkafka's own log lines, through Python logging instead of straight to stderr.
rdkafka_log = logging.getLogger("librdkafka")

_UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART


class RepeatFilter(logging.Filter):
    """Lets a message through at most once per ``period`` seconds, whatever its numbers.

    While a broker is away every client reports every reconnect attempt; one line per
    problem every few seconds says the same without burying everything else.
    """

    def __init__(self, period: float = 10.0) -> None:
        super().__init__()
        self.period = period
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = _DIGITS.sub("#", record.getMessage())
        now = time.monotonic()
        if now - self._last.get(key, -self.period) < self.period:
            return False
        self._last[key] = now
        return True


_DIGITS = re.compile(r"\d+")
log.addFilter(RepeatFilter())
rdkafka_log.addFilter(RepeatFilter())


def _log_error(err: KafkaError) -> None:
    # librdkafka reports transient broker trouble here and retries by itself.
    log.warning("kafka: %s", err.str())


class AuthenticationFailed(SettingsError):
    """The broker refused the configured credentials: a setting no retry fixes (exit 2)."""


def check_authentication(settings: Settings, timeout: float = 5.0) -> None:
    """After a metadata request failed: raise AuthenticationFailed if the broker refused our
    SASL credentials.

    librdkafka reports that only through the error callback, and a failed metadata request
    says "transport failure" either way; without this a wrong password looks like a broker
    that is down, and the services would wait for it forever.
    """
    config = settings.client_config()
    if not str(config.get("security.protocol", "")).upper().startswith("SASL"):
        return
    refused: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())

    probe = Consumer(
        {
            **config,
            "group.id": f"{settings.group_id}.credentials-check",
            "error_cb": on_error,
            "logger": rdkafka_log,
        }
    )
    try:
        deadline = time.monotonic() + timeout
        while not refused and time.monotonic() < deadline:
            probe.poll(0.2)
    finally:
        probe.close()
    if refused:
        raise AuthenticationFailed(
            f"Kafka at {settings.bootstrap_servers} refused the credentials in "
            f"PROCESSOR_KAFKA_CONFIG: {refused[0]}"
        )


# What a broker answers when the principal has no ACL for the operation.
_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


class AccessDenied(SettingsError):
    """The broker denied the job's principal an operation: ACLs are missing (exit 2)."""


def check_denied(settings: Settings, exc: BaseException) -> None:
    """Raise AccessDenied if ``exc`` is the broker refusing an operation for want of an ACL.

    Otherwise a missing ACL looks like a broker that is not there yet, and the services
    would wait for it forever ("waiting for Kafka ...: Topic authorization failed").
    """
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError) and err.code() in _DENIED:
        raise AccessDenied(
            f"Kafka at {settings.bootstrap_servers} denied the job's principal an operation "
            f"({err.str()}): `processor acls --coordinator-principal User:<name> "
            "--worker-principal User:<name>` prints the ACLs each needs"
        ) from None


def common_config(settings: Settings) -> dict[str, Any]:
    """What every client gets: bootstrap servers and the security settings, our logging."""
    return {**settings.client_config(), "error_cb": _log_error, "logger": rdkafka_log}


# librdkafka stops fetching a partition once its local queue holds `queued.min.messages`
# (100,000) or `queued.max.messages.kbytes`, then waits this long before it looks again (1 s by
# default): a task that drains 100,000 records in less than that sits idle for the rest (Java's
# consumer fetches as soon as its buffer drains). Nexmark q2 on a 10 M event backlog: 399,000
# -> 530,000 events/s with 10 ms (bench/experiments/README.md). PROCESSOR_KAFKA_CONFIG may say.
FETCH_QUEUE_BACKOFF_MS = 10


# How long the control topic's consumers (each worker's, the coordinator's) let the broker
# hold a fetch while there is nothing to read: Java's default (``fetch.max.wait.ms``). A record
# ends the wait as it arrives (``fetch.min.bytes`` 1: a control record reached its consumer in
# 6-7 ms with 500 as with 10), and the polls return on their own timeouts, so it costs no
# latency; an idle consumer asks twice a second, not a hundred times. At 10 ms these consumers
# made most of a Nexmark q3 run's fetches (6,010 of 14,314 requests; 2,483 at 500 ms).
CONTROL_FETCH_WAIT_MS = 500


def consumer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """A consumer that only ever sees committed data and never commits by itself.

    Its fetching is the engine's default, which ``PROCESSOR_KAFKA_CONFIG`` overrides (a
    larger ``fetch.min.bytes``, a longer ``fetch.wait.max.ms``); what exactly-once rests on
    (``read_committed``, no commits of its own, the group) it does not; ``overrides`` (the
    caller's: a control consumer's wait) override both.
    """
    return {
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "fetch.wait.max.ms": 50,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": 65536,
        **common_config(settings),
        "group.id": settings.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        **overrides,
    }


def consumer(settings: Settings, **overrides: Any) -> Consumer:
    return Consumer(consumer_config(settings, **overrides))


def task_consumer(settings: Settings, **overrides: Any) -> Consumer:
    """A consumer of positions the task sets itself (its committed offsets): it never jumps.

    With ``earliest`` a position below the log start (records deleted by retention) would
    silently skip to the first record left; ``error`` makes the fetch fail instead
    (``_AUTO_OFFSET_RESET``), and the task fails rather than count without those records.
    """
    return consumer(settings, **{"auto.offset.reset": "error", **overrides})


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """The engine's batching, which the user's ``PROCESSOR_KAFKA_CONFIG`` overrides (a codec
    or a linger of their own), and then what the caller needs (``overrides``: a control
    producer's ``linger.ms`` of 0), which it does not."""
    return {
        # What a task writes waits for its transaction's commit anyway (the commit flushes):
        # 20 ms (the peers' setting) makes fewer, larger batches for the broker to take.
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "partitioner": "murmur2_random",  # the same key -> partition mapping as Java clients
        **common_config(settings),
        **overrides,
    }


def producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def produce_waiting(
    producer: Producer, topic: str, value: bytes, partition: int | None = None
) -> None:
    """``producer.produce``, waiting while its local queue is full (BufferError: librdkafka
    sends meanwhile), for a loader that may get ahead of the broker."""
    while True:
        try:
            if partition is None:
                producer.produce(topic, value)
            else:
                producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def record_limit(settings: Settings) -> int:
    """The largest record (key, value and headers) a task may hand its producer: librdkafka
    refuses larger ones (MSG_SIZE_TOO_LARGE), so the tasks make them dead records instead."""
    configured = producer_config(settings).get("message.max.bytes", 1_000_000)
    return limits.record_limit(int(configured))


def admin(settings: Settings) -> AdminClient:
    return AdminClient(common_config(settings))


def committed_offsets(
    config: dict[str, Any], group: str, partitions: list[TopicPartition], timeout: float = 60
) -> list[TopicPartition]:
    """The last offsets ``group`` committed for ``partitions`` (``config``: a client's, such
    as `common_config`), with their metadata and per-partition errors.

    Asked through a consumer of the group, not `AdminClient.list_consumer_group_offsets`:
    librdkafka's admin client dereferences a null group handle when that request is answered
    NOT_COORDINATOR (a group coordinator that moved or is still loading, which Kafka 4's
    coordinator also answers for a slow stable read), and the process dies of SIGSEGV
    (librdkafka#5040, confluent-kafka-javascript#374). A consumer has a group handle and
    looks the coordinator up again. ``read_uncommitted`` makes librdkafka ask without
    ``require_stable``: a pending offset commit (a zombie's, see
    `processor.worker.task.committed_after_fencing`) is then not waited for.
    """
    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        result: list[TopicPartition] = consumer.committed(partitions, timeout=timeout)
        return result
    finally:
        consumer.close()


def topic_partitions(client: AdminClient | Consumer, topic: str, timeout: float = 10) -> int | None:
    """Number of partitions of ``topic``, or None when it does not exist."""
    metadata = client.list_topics(topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None or (info.error is not None and info.error.code() == _UNKNOWN_TOPIC):
        return None
    if info.error is not None:
        raise KafkaException(info.error)  # e.g. no leader yet: worth a retry, not "missing"
    return len(info.partitions)


def assign(consumer: Consumer, partitions: list[TopicPartition], timeout: float = 10) -> None:
    """``consumer.assign(partitions)``, their topics' leaders looked up first. A consumer that
    does not know a partition's leader yet resolves a logical offset (``OFFSET_BEGINNING``,
    ``OFFSET_END``) only at its next try, half a second later: a source's first record came
    0.51 s after its assign, 0.06 s with this. A failed lookup leaves that to the consumer."""
    for topic in sorted({tp.topic for tp in partitions}):
        with contextlib.suppress(KafkaException):
            consumer.list_topics(topic, timeout=timeout)
    consumer.assign(partitions)


def behind(consumer: Consumer, tp: TopicPartition, assigned: int) -> int:
    """Records of ``tp`` the consumer has yet to read: its high watermark less its position.
    Until its first fetch is answered the consumer knows neither (both -1001, read before as
    nothing to read: a task just started looked done to the coordinator's idle count), so the
    high watermark is then asked of the broker, and the position is where the partition was
    assigned (``assigned``). After a fetch the position moves past markers and aborted records
    by itself. A broker that does not answer (a partition's leader away) leaves it unknown:
    1, not caught up, rather than an error in the task's checkpoint."""
    _, high = consumer.get_watermark_offsets(tp, timeout=1, cached=True)
    if high < 0:
        try:
            _, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
        except KafkaException:
            return 1
    position = consumer.position([tp])[0].offset
    if position < 0:
        position = assigned
    return max(0, high - position) if high >= 0 else 1


def cluster_id(
    client: AdminClient | Consumer, topic: str | None = None, timeout: float = 10
) -> str | None:
    """The Kafka cluster's id (from the metadata of ``topic`` alone, when given)."""
    found: str | None = client.list_topics(topic, timeout=timeout).cluster_id
    return found


def ensure_topic(
    client: AdminClient,
    topic: str,
    partitions: int,
    config: Mapping[str, str] | None = None,
    timeout: float = 30,
    replication: Replication | None = None,
) -> int:
    """Create ``topic`` if it is missing; return its partition count once it is usable.

    ``replication`` (``replication.topic_replication``) gives its copies and their topic
    settings, which ``config`` overrides; None: the broker's defaults.
    """
    existing = topic_partitions(client, topic)
    if existing is not None:
        return existing
    replication = replication or Replication()
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication.factor,
        config={**replication.config, **(config or {})},
    )
    futures = client.create_topics([new])
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    # Usable once every partition has a leader: a producer whose first metadata has a
    # partition without one puts no keyless record there until its next metadata refresh,
    # 5 minutes later (a test's source partition stayed empty that long).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.list_topics(topic, timeout=timeout).topics.get(topic)
        if info is not None and info.error is None and _led(info.partitions.values()):
            return len(info.partitions)
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} was created but has no leader everywhere after {timeout}s")


def _led(partitions: Iterable[Any]) -> bool:
    """Whether every partition (``PartitionMetadata``) has a leader."""
    leaders = [p.leader for p in partitions]
    return bool(leaders) and min(leaders) >= 0


def watermark_offsets(
    consumer: Consumer, tp: TopicPartition, timeout: float = 10
) -> tuple[int, int]:
    """``(low, high)`` of a partition from its leader, retried while the error is one a
    leader election or a topic still being created clears (not leader, no leader yet,
    unknown partition, timeout); anything else, or no answer by ``timeout``, raises."""
    deadline = time.monotonic() + timeout

    def ask() -> tuple[int, int]:
        left = deadline - time.monotonic()
        low, high = consumer.get_watermark_offsets(tp, timeout=max(0.5, left), cached=False)
        return int(low), int(high)

    return retried(ask, timeout)


def retried(call: Callable[[], T], timeout: float, pause: float = 0.2) -> T:
    """``call()``, asked again every ``pause`` seconds while it raises a `transient` error;
    anything else, or a transient error after ``timeout``, raises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not transient(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)


def transient(exc: KafkaException) -> bool:
    """Whether ``exc`` is an error that a leader election, a coordinator move or load, or a
    topic still being created clears: a request worth sending again."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT)


_TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NOT_COORDINATOR,
    # A group coordinator still loading the offsets topic (a broker started seconds before).
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._ALL_BROKERS_DOWN,
    # A new leader whose high watermark has not caught up yet (KIP-207): seen right after
    # the leading broker of the control topic was killed.
    KafkaError.OFFSET_NOT_AVAILABLE,
}


def consume_ready(consumer: Consumer, batch: int, wait: float) -> list[Message]:
    """What is there now, or else the first record within ``wait`` with whatever came along.

    ``consume(n, timeout)`` waits the whole timeout unless ``n`` records arrive, so on a
    quiet stream every hop (control, source, shuffle) would add the full wait to latency.
    """
    msgs: list[Message] = consumer.consume(batch, 0)
    if msgs:
        return msgs
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first, *consumer.consume(max(1, batch - 1), 0)]
