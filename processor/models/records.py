"""Wire formats of the internal topics.

A shuffle record carries many partial counts at once: the upstream task (the *channel*) in a
2-byte prefix of the value, then a JSON object ``{key: count}`` of keys that all belong to the
record's partition. One record per partition and flush instead of one per key: the per-record
costs (produce, the broker's append, consume, the receiving task's Python loop) were most of
the shuffle's cost, and JSON is encoded and decoded in C (orjson where it answers exactly as
the standard library does: `processor.models.fastjson`). The partition of a key is
``shuffle_partition``: fixed, because a key's state lives in the task of its partition.

Barriers are control records marked by the ``processor.barrier`` header; only internal topics
are ever read for barriers, so a user record that happens to carry that header is plain data.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from processor.models.fastjson import dumps, loads

BARRIER_HEADER = "processor.barrier"
WATERMARK_HEADER = "processor.watermark"

_CHANNEL = struct.Struct(">H")
_BARRIER = struct.Struct(">Hqq")
_WATERMARK = struct.Struct(">Hq?")

MAX_CHANNELS = 1 << 16


@dataclass(frozen=True, slots=True)
class Barrier:
    """Barrier ``checkpoint_id`` written by upstream task ``channel`` into a shuffle partition.

    It carries the time the checkpoint was triggered, so that every task can tell how long
    the barrier took to reach it (the checkpoint's start delay).
    """

    checkpoint_id: int
    channel: int
    triggered_at_ms: int = 0


Headers = list[tuple[str, str | bytes | None]]  # as confluent-kafka types them


def encode_barrier(barrier: Barrier) -> tuple[bytes, Headers]:
    """Value and headers of a barrier control record."""
    value = _BARRIER.pack(barrier.channel, barrier.checkpoint_id, barrier.triggered_at_ms)
    return value, [(BARRIER_HEADER, value)]


def decode_barrier(value: bytes) -> Barrier:
    channel, checkpoint_id, triggered_at_ms = _BARRIER.unpack(value)
    return Barrier(checkpoint_id, channel, triggered_at_ms)


def is_barrier(headers: list[tuple[str, Any]] | dict[str, Any] | None) -> bool:
    return control_kind(headers) == "barrier"


@dataclass(frozen=True, slots=True)
class Watermark:
    """Upstream task ``channel`` will send no record older than ``time_ms`` any more; or, if
    ``idle``, sends nothing for now and must not hold its readers' watermark back."""

    channel: int
    time_ms: int
    idle: bool = False


def encode_watermark(mark: Watermark) -> tuple[bytes, Headers]:
    """Value and headers of a watermark control record (a barrier's sibling)."""
    value = _WATERMARK.pack(mark.channel, mark.time_ms, mark.idle)
    return value, [(WATERMARK_HEADER, b"")]


def decode_watermark(value: bytes) -> Watermark:
    channel, time_ms, idle = _WATERMARK.unpack(value)
    return Watermark(channel, time_ms, idle)


def control_kind(headers: list[tuple[str, Any]] | dict[str, Any] | None) -> str | None:
    """The kind of a control record ("barrier", "watermark"); None for a data record."""
    if not headers:
        return None
    for name in headers if isinstance(headers, dict) else (h[0] for h in headers):
        if name == BARRIER_HEADER:
            return "barrier"
        if name == WATERMARK_HEADER:
            return "watermark"
    return None


def shuffle_partition(key: bytes, partitions: int) -> int:
    """The shuffle partition of ``key``: CRC-32, stable across processes and versions."""
    return zlib.crc32(key) % partitions


def encode_counts(channel: int, counts: dict[str, int]) -> bytes:
    """A shuffle record's value: the channel, then the partial counts as a JSON object."""
    return _CHANNEL.pack(channel) + dumps(counts)


def decode_counts(value: bytes) -> tuple[int, dict[str, int]]:
    """Raise ValueError (or struct.error) for anything ``encode_counts`` did not write."""
    (channel,) = _CHANNEL.unpack_from(value)
    counts = loads(value[2:])
    if not isinstance(counts, dict) or not all(type(n) is int for n in counts.values()):
        raise ValueError("not a JSON object of integer counts")
    return channel, counts


def channel_of(value: bytes) -> int:
    return int(_CHANNEL.unpack_from(value)[0])


def encode_shuffle(channel: int, body: dict[str, Any] | Sequence[Sequence[Any]]) -> bytes:
    """A pipeline's shuffle record: the channel, then JSON: an object of partial aggregates
    by key (a combined shuffle; word count's format) or a list of ``[key, value]`` pairs
    (``[key, value, event time ms]`` in a timed pipeline, ``[key, value, event time ms,
    headers]`` into a stage that takes record metadata)."""
    return _CHANNEL.pack(channel) + dumps(body)


_FIRST, _THIRD, _FOURTH = itemgetter(0), itemgetter(2), itemgetter(3)


def _pairs(body: list[Any]) -> bool:
    """Every item a ``[key text, value]`` or every one a ``[key text, value, int time]``;
    with C loops (map) rather than a generator: a shuffle record holds thousands."""
    if not body:
        return True
    if set(map(type, body)) != {list}:
        return False
    lengths = set(map(len, body))
    if lengths != {2} and lengths != {3} and lengths != {4}:
        return False
    if set(map(type, map(_FIRST, body))) != {str}:
        return False
    if lengths == {4}:  # with metadata: a time (None after an untimed aggregation), headers
        return set(map(type, map(_THIRD, body))) <= {int, type(None)} and set(
            map(type, map(_FOURTH, body))
        ) == {list}
    return lengths == {2} or set(map(type, map(_THIRD, body))) == {int}


def decode_shuffle(value: bytes) -> tuple[int, dict[str, Any] | list[list[Any]]]:
    """Raise ValueError (or struct.error) for anything ``encode_shuffle`` did not write."""
    (channel,) = _CHANNEL.unpack_from(value)
    body = loads(value[2:])  # `loads_deep` after a RecursionError
    if isinstance(body, dict):
        return channel, body
    if isinstance(body, list) and _pairs(body):
        return channel, body
    raise ValueError("not a JSON object or a list of [key, value(, time(, headers))] pairs")
