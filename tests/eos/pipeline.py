"""The topology of Kafka's EOS test (EosTestClient, with repartitioning) in this project's API.

Input ``data``: Kafka key a decimal string, value an int (JSON text). Outputs, every one
keyed by the input's key:

- ``echo``: every input record as is. A sink partitions keyed records with Java's murmur2,
  so with ``echo`` as many partitions as ``data`` (and a murmur2 producer on ``data``) a
  record lands in the partition number it came from, in its order there.
- ``min`` and ``sum`` per key after one shuffle, ``max`` and ``cnt`` after a second one (the
  Streams app's ``repartition`` topic), each one update per input record (``emit="record"``).

One key lives in one input partition, read in order by one source task, and goes to one
shuffle partition: a key's updates come in its input order.
"""

from __future__ import annotations

from typing import Any

from processor import Pipeline


def kafka_key(_value: Any, meta: Any) -> Any:
    """The input record's Kafka key: what Streams' ``groupByKey`` groups by."""
    return meta.key


def _echo_key(_key: Any, keyed: tuple[str, int]) -> str:
    return keyed[0]


def _echo_value(_key: Any, keyed: tuple[str, int]) -> bytes:
    return str(keyed[1]).encode()


def _with_key(value: int, meta: Any) -> tuple[str, int]:
    return meta.key, value


def build(
    data: str = "data",
    echo: str = "echo",
    min: str = "min",  # the topic names of Kafka's test, shadowing builtins here only
    sum: str = "sum",
    max: str = "max",
    cnt: str = "cnt",
) -> Pipeline:
    """The EOS test's pipeline over the given topics."""
    p = Pipeline()
    records = p.source(data, key="text", value="json")
    records.map(_with_key, meta=True, name="echo").sink(echo, key=_echo_key, value=_echo_value)
    grouped = records.key_by(kafka_key, meta=True, name="grouped")
    grouped.reduce(_min, name="min", emit="record").sink(min)
    grouped.sum(name="sum", emit="record").sink(sum)
    repartitioned = records.key_by(kafka_key, meta=True, name="repartition")
    repartitioned.reduce(_max, name="max", emit="record").sink(max)
    repartitioned.count(name="cnt", emit="record").sink(cnt)
    return p


def _min(a: int, b: int) -> int:
    return b if b < a else a


def _max(a: int, b: int) -> int:
    return b if b > a else a


pipeline = build()
