"""Where a producer's partitioner puts a keyed record, for a source read as already keyed
(`processor.api.keying`): a record found elsewhere is refused, not counted under a key whose
other records another task holds.

- ``murmur2``: Java's default partitioner (Kafka Streams, Flink, Connect, every Java client)
  and librdkafka's ``murmur2`` / ``murmur2_random`` (`processor.models.murmur2`);
- ``crc32``: librdkafka's ``consistent`` / ``consistent_random``, the default of the C, Go and
  Python clients built on it (confluent-kafka): CRC-32 of the key, as zlib computes it.

A record with no key has no place (the ``*_random`` partitioners spread them at random).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from processor.models.murmur2 import murmur2

PARTITIONERS = ("murmur2", "crc32")
_HASHES: dict[str, Callable[[bytes], int]] = {
    "murmur2": lambda key: murmur2(key) & 0x7FFFFFFF,  # Java's toPositive
    "crc32": zlib.crc32,
}


class Placement:
    """The partition of each key under one partitioner, for a topic of ``partitions``;
    remembered for the last ``cache`` keys seen (a key's records come again and again)."""

    def __init__(self, partitioner: str, partitions: int, cache: int = 65536) -> None:
        self._hash = _HASHES[partitioner]
        self.partitions = partitions
        self._known: dict[bytes, int] = {}
        self._cache = cache

    def of(self, key: bytes | None) -> int | None:
        """The partition of ``key`` (None for a record without one).

        >>> Placement("murmur2", 4).of(b"u1"), Placement("crc32", 4).of(b"u1")
        (0, 2)
        """
        if key is None:
            return None
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= self._cache:
                self._known.clear()
            known = self._known[key] = self._hash(key) % self.partitions
        return known
