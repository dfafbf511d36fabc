"""Nexmark events into a topic as the crate's ``--no-wait`` lines would be: one JSON object
per event (``{"Person": {...}}``, ``{"Auction": {...}}`` or ``{"Bid": {...}}``), no key,
event i into partition i % partitions, so that each partition keeps the send order (and its
disorder, under the generator's bound)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from confluent_kafka import Producer

from bench.measure import create_topic
from tests import nexmark_data as nexmark


def load(bootstrap: str, topic: str, events: Iterable[nexmark.Event], partitions: int) -> int:
    """Creates ``topic`` and writes ``events`` to it; the number written."""
    create_topic(bootstrap, topic, partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )
    count = 0
    for event in events:
        value = json.dumps(event, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, value, partition=count % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{topic}: {left} events not delivered")
    return count
