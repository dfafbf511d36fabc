"""A drained epoch (`processor.engine.epoch.drain`) into the task's Kafka transaction.

Both task kinds ship it the same way: sink records and records with headers as they are
(`TransactionalOutput.produce_many`: no per-record keyword dicts), shuffle and feedback
records each to its partition. A keyed task keeps the segments of its open transaction to
write them again if the transaction aborts (`processor.worker.keyed_epoch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from processor.models.records import Watermark, encode_watermark

if TYPE_CHECKING:
    from processor.engine.epoch import Drained, Shuffled
    from processor.engine.time import Mark
    from processor.kafka.output import TransactionalOutput

# (topic, partition or None for sink records, items): items are (key, value) pairs, or
# (key, value, headers) for records with headers.
Segment = tuple[str, int | None, list[Any]]


def segments_of(drained: Drained, topics: Sequence[str], fed_topic: str | None) -> list[Segment]:
    """``drained`` as segments; ``topics``: the topic of each shuffle in ``drained``'s
    order, ``fed_topic``: the loop's feedback topic."""
    segments: list[Segment] = [(topic, None, items) for topic, items in drained.sinks.items()]
    segments.extend((topic, None, items) for topic, items in drained.headed.items())
    for topic, shuffled in zip(topics, drained.shuffled, strict=True):
        segments.extend(_by_partition(topic, shuffled))
    if fed_topic is not None:
        segments.extend(_by_partition(fed_topic, drained.fed_back))
    return segments


def _by_partition(topic: str, shuffled: Shuffled) -> list[Segment]:
    """One segment per partition, its records in their order (Kafka's order is a
    partition's)."""
    if not shuffled:
        return []
    groups: dict[int, list[tuple[None, bytes]]] = {}
    for p, v in shuffled:
        items = groups.get(p)
        if items is None:
            items = groups[p] = []
        items.append((None, v))
    return [(topic, p, items) for p, items in groups.items()]


def ship(out: TransactionalOutput, segments: Sequence[Segment]) -> int:
    """Produce ``segments`` into the open transaction; returns the records produced."""
    shipped = 0
    for topic, partition, items in segments:
        if partition is None:
            out.produce_many(topic, items)
        else:
            for key, value in items:
                out.produce(topic, value, key=key, partition=partition)
        shipped += len(items)
    return shipped


def write_mark(
    out: TransactionalOutput, shuffles: Sequence[tuple[str, int, int]], mark: Mark
) -> None:
    """Watermark ``mark`` (time, idle) into every partition of each of the task's shuffles,
    ``(topic, partitions, the task's channel)``: after the epoch's records, before its
    barrier (`processor.engine.time`)."""
    for topic, partitions, channel in shuffles:
        value, headers = encode_watermark(Watermark(channel, mark[0], mark[1]))
        for p in range(partitions):
            out.produce(topic, value, partition=p, headers=headers)
