"""``processor produce``: lines of text files into a topic (bytes as they are, newline removed)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import TopicPartition

from processor.config import Settings
from processor.kafka import clients
from processor.kafka.replication import topic_replication


def written_before(settings: Settings, topic: str, partitions: int, timeout: float = 30) -> bool:
    """Whether anything was ever written to the topic (an offset past 0 in any partition)."""
    consumer = clients.consumer(settings)
    try:
        return any(
            clients.watermark_offsets(consumer, TopicPartition(topic, p), timeout)[1] > 0
            for p in range(partitions)
        )
    finally:
        consumer.close()


def produce_lines(
    settings: Settings,
    topic: str,
    files: Iterable[Path],
    partitions: int,
    progress: bool = True,
    once: bool = False,
) -> int:
    """Produce the lines; with ``once``, nothing (returns -1) when the topic had records."""
    admin = clients.admin(settings)
    rep = topic_replication(settings, admin)
    existing = clients.ensure_topic(admin, topic, partitions, replication=rep)
    if once and written_before(settings, topic, existing):
        return -1
    files = list(files)
    total_bytes = sum(f.stat().st_size for f in files) or 1
    producer = clients.producer(settings, **{"enable.idempotence": True, "linger.ms": 20})
    sent = done_bytes = 0
    last_draw = 0.0
    for path in files:
        with path.open("rb") as handle:
            for raw in handle:
                line = raw.rstrip(b"\r\n")
                clients.produce_waiting(producer, topic, line)
                sent += 1
                done_bytes += len(raw)
                if progress and sent % 10_000 == 0 and time.monotonic() - last_draw > 0.2:
                    _draw(done_bytes / total_bytes, sent)
                    last_draw = time.monotonic()
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} records to {topic} were not acknowledged by the broker")
    if progress:
        _draw(1.0, sent)
        sys.stderr.write("\n")
    return sent


def _draw(fraction: float, sent: int) -> None:
    width = 40
    filled = int(fraction * width)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction:6.1%} {sent:,} lines")
    sys.stderr.flush()


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="the topic to write (created if missing)")
    parser.add_argument("--partitions", type=int, default=4, help="if the topic is created")
    parser.add_argument(
        "--once", action="store_true", help="produce nothing if the topic already has records"
    )
    parser.add_argument("files", nargs="+", type=Path, help="text files, one record per line")


def run(args: argparse.Namespace) -> int:
    """``processor produce``: the files' lines into the topic."""
    from processor.commands import base

    settings = base.setup(args)
    sent = produce_lines(settings, args.topic, args.files, args.partitions, once=args.once)
    if sent < 0:
        print(f"{args.topic} already has records: nothing produced (--once)")
    else:
        print(f"produced {sent:,} lines to {args.topic}")
    return 0
