"""bench/pipelines/carts_avro.py's work in plain confluent-kafka code, exactly once.

    python plain_carts_app.py BOOTSTRAP INPUT PARTITIONS OUTPUT CHANGELOG TXN_ID INTERVAL_MS

What a careful user writes without a framework, as Kafka Streams does underneath: one process
per share of the input partitions (``PARTITIONS``: ``0,2``), a read_committed consumer with
the source tasks' client settings (``processor.kafka.clients``), a transactional producer
(``TXN_ID``) with the engine's producer settings, the carts and their timers in dicts, the
watermark the lowest of its partitions' highest event times less 1 s. Every record: JSON
decoded (orjson), the cart updated, its outcome written as plain Avro (fastavro) with a key
and headers. Every ``INTERVAL_MS`` one transaction commits the outcomes, each changed cart
(JSON, or a tombstone) to a compacted ``CHANGELOG`` topic, and the consumer's positions
(``send_offsets_to_transaction``): the state is as durable as the output, exactly once. There
is no restore: this is the bound a framework's work is measured against, not a framework.

It reads until the ends its partitions had when it started, fires every timer the last
watermark passed, commits, prints ``DONE <epoch ms>`` and exits. Prints
``FIRST_RECORD <epoch ms>`` on its first record.
"""

from __future__ import annotations

import heapq
import io
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fastavro  # noqa: E402
import orjson  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from bench.pipelines.carts_avro import (  # noqa: E402
    ABANDON_AFTER_MS,
    OUT_OF_ORDERNESS_MS,
    OUTCOME,
)
from processor.config import Settings  # noqa: E402
from processor.kafka import clients  # noqa: E402

WAIT_S = 0.05  # the source tasks' wait for a first record when nothing is ready


class Carts:
    """The carts, their timers, and what a transaction has to write."""

    def __init__(self, producer: Producer, output: str) -> None:
        self.producer = producer
        self.output = output
        self.carts: dict[str, dict[str, Any]] = {}
        self.timers: dict[str, set[int]] = {}
        self.due: list[tuple[int, str]] = []  # (time, user), a heap
        self.dirty: set[str] = set()
        self.schema = fastavro.parse_schema(OUTCOME)

    def on_record(self, user: str, event: dict[str, Any], ts: int, source: bytes) -> None:
        kind = event["type"]
        cart = self.carts.get(user)
        if kind == "add":
            if cart is None:
                cart = self.carts[user] = {"items": 0, "total": 0, "source": source.decode()}
            cart["items"] += 1
            cart["total"] += event["price"]
            self.dirty.add(user)
            at = ts + ABANDON_AFTER_MS
            pending = self.timers.setdefault(user, set())
            if at not in pending:
                pending.add(at)
                heapq.heappush(self.due, (at, user))
            self.emit(user, "add", cart, ts)
        elif kind == "checkout" and cart is not None:
            del self.carts[user]
            self.timers.pop(user, None)
            self.dirty.add(user)
            self.emit(user, "checkout", cart, ts)

    def fire(self, watermark: int) -> None:
        """Every timer the watermark passed, in (time, user) order."""
        while self.due and self.due[0][0] < watermark:
            at, user = heapq.heappop(self.due)
            pending = self.timers.get(user)
            if pending is None or at not in pending:
                continue  # cleared by a checkout
            pending.discard(at)
            if pending:
                continue  # a later add armed a later timer
            del self.timers[user]
            cart = self.carts.pop(user, None)
            if cart is not None:
                self.dirty.add(user)
                self.emit(user, "abandoned", cart, at)

    def emit(self, user: str, event: str, cart: dict[str, Any], at: int) -> None:
        value = {"user": user, "event": event, "at": at, **cart}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, value)
        heads: list[tuple[str, str | bytes | None]] = [
            ("event", event.encode()),
            ("source", cart["source"].encode()),
        ]
        produce(self.producer, self.output, out.getvalue(), user.encode(), heads)

    def write_changelog(self, topic: str, partition: int) -> None:
        for user in self.dirty:
            cart = self.carts.get(user)
            state = None if cart is None else orjson.dumps([cart, sorted(self.timers[user])])
            produce(self.producer, topic, state, user.encode(), None, partition)
        self.dirty.clear()


def produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes,
    heads: list[tuple[str, str | bytes | None]] | None,
    partition: int = -1,
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=heads)
            return
        except BufferError:
            producer.poll(0.01)


def main(argv: list[str]) -> None:
    bootstrap, topic, parts, output, changelog, txn_id, interval = argv
    partitions = [int(p) for p in parts.split(",")]
    settings = Settings(bootstrap_servers=bootstrap, job_name="plain-carts")
    config = clients.consumer_config(settings, **{"group.id": f"{txn_id}-group"})
    pconfig = clients.producer_config(settings, **{"transactional.id": txn_id})
    for conf in (config, pconfig):
        conf.pop("error_cb", None)
        conf.pop("logger", None)
    consumer, producer = Consumer(config), Producer(pconfig)
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in partitions
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    producer.init_transactions(30)
    producer.begin_transaction()
    carts = Carts(producer, output)
    highest = {p: -(2**62) for p in partitions}
    every = int(interval) / 1000
    next_commit = time.monotonic() + every
    first = True
    while True:
        msgs = clients.consume_ready(consumer, settings.consume_batch, WAIT_S)
        if msgs and first:
            first = False
            print(f"FIRST_RECORD {int(time.time() * 1000)}", flush=True)
        for msg in msgs:
            if msg.error() is not None:
                raise RuntimeError(str(msg.error()))
            event = orjson.loads(msg.value() or b"")
            ts = event["ts"]
            part = msg.partition() or 0
            if ts > highest[part]:
                highest[part] = ts
            source: Any = dict(msg.headers() or []).get("source") or b""
            carts.on_record((msg.key() or b"").decode(), event, ts, source)
        carts.fire(min(highest.values()) - OUT_OF_ORDERNESS_MS)
        positions = consumer.position([TopicPartition(topic, p) for p in partitions])
        # An empty partition is done at once (its position stays unset: -1001).
        done = all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions)
        if done or time.monotonic() >= next_commit:
            next_commit = time.monotonic() + every
            carts.write_changelog(changelog, partitions[0])
            read = [tp for tp in positions if tp.offset >= 0]  # not yet fetched: -1001
            if read:
                group = consumer.consumer_group_metadata()
                producer.send_offsets_to_transaction(read, group)
            producer.commit_transaction()
            if done:
                break
            producer.begin_transaction()
    print(f"DONE {int(time.time() * 1000)}", flush=True)
    consumer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
