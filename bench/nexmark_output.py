"""A Nexmark query's output against its definition (tests/nexmark_data.py) over the same
events: the insert-only queries as a multiset of rows (each row once, nothing else), the
updating ones (q4, q6) by the last value of each key (a tombstone deletes the key), as the
engine's tests compare them (tests/unit/test_nexmark.py). Floats are compared to 9 significant
digits: an average's sum may add in another order.

For large event counts (bench/nexmark.py: 10 M) the same comparison in bounded memory: `Rows`
(a count and an order-independent digest of the rows), `got_rows` (the output streamed), and
bench/nexmark_expect.py (the definitions over the events streamed)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests import nexmark_data as nexmark
from tests.integration.pipeline_run import read_committed

UPDATING_KEYS = {"q4": "category", "q6": "seller"}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def _row(row: dict[str, Any]) -> str:
    return json.dumps({k: _rounded(v) for k, v in row.items()}, sort_keys=True)


def expected(query: str, stream: list[nexmark.Event]) -> Counter[str]:
    want = getattr(nexmark, query)(stream)
    if query in UPDATING_KEYS:
        return Counter(f"{k}={_row(v)}" for k, v in want.items())
    return Counter(_row(r) for r in want)


def got(query: str, bootstrap: str, topic: str) -> Counter[str]:
    """The committed output of ``topic``: rows, or the last row of each key."""
    records = [r for part in read_committed(bootstrap, topic).values() for r in part]
    if query not in UPDATING_KEYS:
        return Counter(_row(json.loads(value)) for _, value, _ in records if value is not None)
    field = UPDATING_KEYS[query]
    last: dict[str, str | None] = {}
    for key, value, _ in records:
        if key is None:
            raise ValueError(f"{topic}: a record without a key")
        parsed = json.loads(key)
        name = str(parsed[field] if isinstance(parsed, dict) else parsed)
        last[name] = None if value is None else _row(json.loads(value))
    return Counter(f"{k}={v}" for k, v in last.items() if v is not None)


def compare(want: Counter[str], have: Counter[str]) -> dict[str, Any]:
    """Whether they are equal, and a few rows of each difference."""
    missing, extra = want - have, have - want
    return {
        "exact": not missing and not extra,
        "rows": sum(want.values()),
        "got": sum(have.values()),
        "missing": sum(missing.values()),
        "extra": sum(extra.values()),
        "missing_sample": sorted(missing)[:5],
        "extra_sample": sorted(extra)[:5],
    }


# -- bounded memory, for large event counts (bench/nexmark.py) ------------------------------

DETAIL = 50_000  # rows a Rows keeps as rows (for the differences' samples); beyond, a digest
_MASK = (1 << 64) - 1


class Rows:
    """A multiset of canonical rows (``_row``) in bounded memory: their count and the sum of
    their 64-bit BLAKE2b digests (mod 2^64: independent of the order), and the rows themselves
    while there are at most ``detail`` of them, for a difference's samples. Two multisets with
    equal counts and sums are equal but with a chance of about 2^-64."""

    def __init__(self, detail: int = DETAIL) -> None:
        self.count = 0
        self.digest = 0
        self.detail = detail
        self.rows: Counter[str] | None = Counter()

    def add(self, row: str) -> None:
        self.count += 1
        value = int.from_bytes(hashlib.blake2b(row.encode(), digest_size=8).digest(), "little")
        self.digest = (self.digest + value) & _MASK
        if self.rows is not None:
            self.rows[row] += 1
            if self.count > self.detail:
                self.rows = None


def compare_rows(want: Rows, have: Rows) -> dict[str, Any]:
    """`compare` while both hold their rows; else by count and digest (no samples)."""
    if want.rows is not None and have.rows is not None:
        return compare(want.rows, have.rows) | {"by": "rows"}
    exact = want.count == have.count and want.digest == have.digest
    return {
        "exact": exact,
        "rows": want.count,
        "got": have.count,
        "missing": None,
        "extra": None,
        "by": "count and digest",
    }


def last_values(query: str, values: dict[str, dict[str, Any]]) -> Rows:
    """An updating query's last value per key as `got` writes it (``key=row``), all kept."""
    rows = Rows(detail=len(values) + 1)
    for key, value in values.items():
        rows.add(f"{key}={_row(value)}")
    return rows


def stream_records(
    bootstrap: str, topic: str, timeout: float = 600
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (key, value), partition by partition in log order,
    streamed (a plain read_committed consumer); raises if a partition does not reach the end
    it had when the read began within ``timeout`` (a transaction left open)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"nexmark-reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            # What librdkafka holds prefetched stays small: per partition at most 8 MB or
            # 20,000 records, one fetch at most 16 MB.
            "fetch.max.bytes": 16 << 20,
            "max.partition.fetch.bytes": 4 << 20,
            "queued.max.messages.kbytes": 8 << 10,
            "queued.min.messages": 20_000,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(ends)} not read to their end")
            for msg in consumer.consume(2000, 0.2):
                if msg.error() is not None:
                    raise RuntimeError(f"{topic}: {msg.error()}")
                yield msg.key(), msg.value()
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
    finally:
        consumer.close()


def got_rows(query: str, bootstrap: str, topic: str) -> tuple[Rows, int]:
    """`got` streamed: the committed output as `Rows`, and how many records it has
    (tombstones and every update of an updating query included)."""
    records = 0
    if query not in UPDATING_KEYS:
        rows = Rows()
        for _, value in stream_records(bootstrap, topic):
            records += 1
            if value is not None:
                rows.add(_row(json.loads(value)))
        return rows, records
    field = UPDATING_KEYS[query]
    last: dict[str, dict[str, Any] | None] = {}
    for key, value in stream_records(bootstrap, topic):
        records += 1
        if key is None:
            raise ValueError(f"{topic}: a record without a key")
        parsed = json.loads(key)
        name = str(parsed[field] if isinstance(parsed, dict) else parsed)
        last[name] = None if value is None else json.loads(value)
    return last_values(query, {k: v for k, v in last.items() if v is not None}), records
