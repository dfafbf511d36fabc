"""Wire formats of the internal topics.

Shuffle records carry their upstream task (the *channel*) in a 2-byte prefix of the value, so
that the receiving task can align barriers per channel without a per-record header. Barriers
are control records marked by the ``processor.barrier`` header; only internal topics are ever
read for barriers, so a user record that happens to carry that header is plain data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

BARRIER_HEADER = "processor.barrier"

_CHANNEL = struct.Struct(">H")
_COUNT = struct.Struct(">Hq")
_BARRIER = struct.Struct(">Hqq")

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
    if not headers:
        return False
    if isinstance(headers, dict):
        return BARRIER_HEADER in headers
    return any(name == BARRIER_HEADER for name, _ in headers)


def encode_count(channel: int, count: int) -> bytes:
    """A shuffle record's value: the channel, then a signed 64-bit partial count."""
    return _COUNT.pack(channel, count)


def decode_count(value: bytes) -> tuple[int, int]:
    channel, count = _COUNT.unpack(value)
    return channel, count


def channel_of(value: bytes) -> int:
    return int(_CHANNEL.unpack_from(value)[0])
