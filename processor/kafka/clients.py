"""Kafka clients configured the same way everywhere: one place for librdkafka settings."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from processor.config import Settings

log = logging.getLogger(__name__)


def _log_error(err: KafkaError) -> None:
    # librdkafka reports transient broker trouble here and retries by itself.
    log.warning("kafka: %s", err)


def consumer(settings: Settings, **overrides: Any) -> Consumer:
    """A consumer that only ever sees committed data and never commits by itself."""
    config: dict[str, Any] = {
        **settings.client_config(),
        "group.id": settings.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 50,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": 65536,
        "error_cb": _log_error,
        **overrides,
    }
    return Consumer(config)


def producer(settings: Settings, **overrides: Any) -> Producer:
    config: dict[str, Any] = {
        **settings.client_config(),
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "partitioner": "murmur2_random",  # the same key -> partition mapping as Java clients
        "error_cb": _log_error,
        **overrides,
    }
    return Producer(config)


def admin(settings: Settings) -> AdminClient:
    config: dict[str, Any] = {**settings.client_config(), "error_cb": _log_error}
    return AdminClient(config)


def topic_partitions(client: AdminClient | Consumer, topic: str, timeout: float = 10) -> int | None:
    """Number of partitions of ``topic``, or None when it does not exist."""
    metadata = client.list_topics(topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        return None
    return len(info.partitions)


def ensure_topic(
    client: AdminClient,
    topic: str,
    partitions: int,
    config: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> int:
    """Create ``topic`` if it is missing; return its partition count once it is usable."""
    existing = topic_partitions(client, topic)
    if existing is not None:
        return existing
    futures = client.create_topics(
        [
            NewTopic(
                topic, num_partitions=partitions, replication_factor=-1, config=dict(config or {})
            )
        ]
    )
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = topic_partitions(client, topic)
        if count is not None:
            return count
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} was created but is not visible after {timeout}s")
