"""``processor counts``: the final count per key, read from the committed output."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from processor.config import Settings
from processor.kafka import clients


def read_final_counts(settings: Settings, topic: str, timeout: float = 60) -> dict[str, int]:
    """Read ``topic`` with read_committed up to its end; the last value per key wins."""
    final, _ = read_updates(settings, topic, timeout)
    return final


def read_updates(
    settings: Settings, topic: str, timeout: float = 60
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Final counts and, per key, every value in log order (for exactly-once checks)."""
    consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.reader"})
    try:
        partitions = clients.topic_partitions(consumer, topic) or 0
        ends: dict[int, int] = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        updates: dict[str, list[int]] = {}

        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.2):
                key, value = msg.key(), msg.value()
                if msg.error() is not None or key is None or value is None:
                    continue
                updates.setdefault(key.decode(), []).append(int(value))
            # read_committed stops at the last stable offset: compare positions with the ends.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        if ends:
            raise TimeoutError(
                f"{topic}: partitions {sorted(ends)} did not reach their end in {timeout}s "
                "(an open transaction?)"
            )
    finally:
        consumer.close()
    return {k: v[-1] for k, v in updates.items()}, updates


def top(counts: dict[str, int], k: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
