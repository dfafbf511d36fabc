"""``processor counts``: the final count per key, read from the committed output."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from confluent_kafka import TopicPartition

from processor.config import Settings
from processor.kafka import clients

log = logging.getLogger(__name__)


def topic_exists(settings: Settings, topic: str) -> bool:
    consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.reader"})
    try:
        return bool(clients.topic_partitions(consumer, topic, 30))
    finally:
        consumer.close()


def read_final_counts(settings: Settings, topic: str, timeout: float = 60) -> dict[str, int]:
    """Read ``topic`` with read_committed up to its end; the last value per key wins."""
    final, _ = read_updates(settings, topic, timeout)
    return final


def read_updates(
    settings: Settings, topic: str, timeout: float = 60
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Final counts and, per key, every value in log order (for exactly-once checks)."""
    updates: dict[str, list[int]] = {}
    for key, value in read_records(settings, topic, timeout):
        if key is not None:
            updates.setdefault(key.decode(), []).append(int(value))
    return {k: v[-1] for k, v in updates.items()}, updates


def read_records(
    settings: Settings, topic: str, timeout: float = 60
) -> list[tuple[bytes | None, bytes]]:
    """Every committed record of ``topic`` (read_committed, up to its end): (key, value), each
    partition in log order, each offset once (a consumer that fetches an offset again after a
    leader change does not make it twice). TimeoutError if a partition does not reach its end
    in time."""
    consumer = clients.consumer(settings, **{"group.id": f"{settings.job_name}.reader"})
    records: list[tuple[bytes | None, bytes]] = []
    read_to: dict[int, int] = {}  # the next offset not read yet, per partition
    try:
        partitions = clients.topic_partitions(consumer, topic) or 0
        ends: dict[int, int] = {}
        for p in range(partitions):
            _, high = clients.watermark_offsets(consumer, TopicPartition(topic, p))
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])

        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.2):
                value = msg.value()
                if msg.error() is not None or value is None:
                    continue
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if offset < read_to.get(partition, 0):
                    log.warning("%s[%d]@%d read again: kept once", topic, partition, offset)
                    continue
                read_to[partition] = offset + 1
                records.append((msg.key(), value))
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
    return records


def top(counts: dict[str, int], k: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", help="default: the output topic")
    parser.add_argument("--top", type=int, default=20, help="words to show (default: 20)")


def run(args: argparse.Namespace) -> int:
    """``processor counts``: word count's final counts, the top ones first."""
    from processor.commands import base

    settings = base.setup(args)
    topic = args.topic or settings.output_topic
    if not topic_exists(settings, topic):
        print(f"processor: topic {topic!r} does not exist", file=sys.stderr)
        return 2
    try:
        final = read_final_counts(settings, topic)
    except ValueError as exc:  # a sink of anything but word count's integers
        print(
            f"processor counts reads word count's output (integer values); {topic} holds "
            f"others ({exc}): `processor tail {topic} --latest` shows any sink's values",
            file=sys.stderr,
        )
        return 2
    for word, count in top(final, args.top):
        print(f"{count:>12,}  {word}")
    print(f"{len(final):,} distinct keys, {sum(final.values()):,} in total")
    return 0
