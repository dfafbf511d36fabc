"""Nexmark events into a topic: the crate's own (`load_crate`, bench/nexmark.py), or the
events of tests/nexmark_data.py's small generator (`load`, bench/nexmark_check.py) as the
crate's ``--no-wait`` lines would be: one JSON object per event (``{"Person": {...}}``,
``{"Auction": {...}}`` or ``{"Bid": {...}}``), no key, event i into partition i % partitions,
so that each partition keeps the send order (and its disorder, under the generator's
bound)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Producer

from bench.harness.measure import create_topic
from processor.commands import nexmark as generate
from processor.config import Settings
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


def load_crate(bootstrap: str, topic: str, events: int, partitions: int) -> dict[str, Any]:
    """The crate's events into ``topic`` as `processor nexmark generate --closing` loads them
    (processor/commands/nexmark.py: blocks of the binary's output round robin over the
    partitions, then one closing event per partition, 60 s of event time after the last
    event, so that both engines close every window and timer of the events). Returns what the
    load cost: the generator alone (its output read and dropped) and the load (generated,
    produced, every record acknowledged), events/s each."""
    binary = generate.find_binary()
    alone = generate.generator_rate(binary, events)
    settings = Settings(bootstrap_servers=bootstrap)
    loaded = generate.load(settings, binary, events, topic, partitions, closing=True)
    return {
        "generator": f"nexmark crate {generate.VERSION} ({binary}), --no-wait --number {events}",
        "events": loaded.events,
        "closing_events": partitions,
        "records": loaded.events + partitions,
        "partitions": partitions,
        "generator_alone_s": round(alone.seconds, 2),
        "generator_alone_events_per_s": round(alone.per_second),
        "load_s": round(loaded.seconds, 2),
        "load_events_per_s": round(loaded.per_second),
    }
