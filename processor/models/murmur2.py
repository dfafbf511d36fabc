"""Kafka's default partition of a keyed record: ``murmur2(key) % partitions``, as Java's
producers (Kafka Streams, Flink, Connect) and librdkafka's ``murmur2_random`` compute it.

The engine's sinks get it from librdkafka; this is for code that must know the partition
without a producer (`processor.testing` places keyed input records as Kafka would).
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner picks for ``key`` (``toPositive`` then
    modulo).

    >>> partition_of(b"u1", 1)
    0
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions
