"""The EOS test's input, as EosTestDriver.generate writes it: random keys (decimal strings of
up to ``keys`` distinct ones) and random int values, by an idempotent producer, at a steady
rate while the job runs.

The producer partitions with murmur2 (``murmur2_random``: Java's default partitioner for
keyed records) so that a sink, which partitions with murmur2 too, writes a key's echo to the
partition number it was read from.
"""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import KafkaError, Message, Producer

MAX_KEYS = 20_000  # EosTestDriver.MAX_NUMBER_OF_KEYS
MAX_VALUE = 10_000  # its values: rand.nextInt(10000)


class Driver:
    """Writes ``total`` records to ``topic`` at ``rate`` a second, in a thread of its own."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        total: int,
        rate: float,
        seed: int,
        keys: int = MAX_KEYS,
    ) -> None:
        self.topic = topic
        self.total = total
        self.rate = rate
        self.keys = keys
        self.random = random.Random(seed)
        self.sent = 0
        self.acked = 0
        # The next offset of each partition once its records are in: the input's end.
        self.acked_per_partition: dict[int, int] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        # Records from this index on wait for `release` (`hold_tail`).
        self._hold_from = total
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eos-driver", daemon=True)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "EosTest",
                "enable.idempotence": True,  # no duplicate or reordered input on a retry
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop early (the records written so far stay the input)."""
        self._stop.set()

    def hold_tail(self, records: int) -> None:
        """The last ``records`` wait for `release`: faults scheduled while the input is
        written still are on a machine slow to recover from the ones before."""
        self._hold_from = max(0, self.total - records)

    def release(self) -> None:
        self._released.set()

    def join(self, timeout: float | None = None) -> None:
        """Until every record is written and acknowledged; raises if any was not."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the driver still runs after {timeout}s ({self.sent} sent)")
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} input records failed: {self.errors[:3]}")

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked += 1
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset >= self.acked_per_partition.get(partition, 0):
                self.acked_per_partition[partition] = offset + 1

    def _run(self) -> None:
        started = time.monotonic()
        batch = max(1, int(self.rate / 50))  # 50 sends a second: smooth, little overhead
        while self.sent < self.total and not self._stop.is_set():
            end = self.total if self._released.is_set() else self._hold_from
            if self.sent >= end:  # the held tail
                paused = time.monotonic()
                self._released.wait(0.1)
                started += time.monotonic() - paused  # the rate counts from the release on
                continue
            for _ in range(min(batch, end - self.sent)):
                key = str(self.random.randrange(self.keys)).encode()
                value = str(self.random.randrange(MAX_VALUE)).encode()
                self._produce(key, value)
                self.sent += 1
            self._producer.poll(0)
            ahead = self.sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        # Long enough to outlast a broker restart: the idempotent producer retries in place.
        left = self._producer.flush(300)
        if left:
            self.errors.append(f"{left} records unsent after 300 s")

    def _produce(self, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key=key, on_delivery=self._delivered)
                return
            except BufferError:
                self._producer.poll(0.05)
