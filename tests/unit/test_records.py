"""Wire formats of the internal topics: barrier records, shuffle counts, barrier detection."""

from __future__ import annotations

import random
import struct
from dataclasses import FrozenInstanceError
from typing import Any

import pytest

from processor.models.records import (
    BARRIER_HEADER,
    MAX_CHANNELS,
    Barrier,
    channel_of,
    decode_barrier,
    decode_count,
    encode_barrier,
    encode_count,
    is_barrier,
)

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


def test_constants() -> None:
    assert BARRIER_HEADER == "processor.barrier"
    assert MAX_CHANNELS == 65536


# --- barriers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checkpoint_id", "channel"),
    [
        (0, 0),
        (1, 0),
        (1, 1),
        (12345, 77),
        (I64_MAX, MAX_CHANNELS - 1),
        (I64_MIN, 0),
        (-1, 2),
    ],
)
def test_barrier_round_trip(checkpoint_id: int, channel: int) -> None:
    barrier = Barrier(checkpoint_id, channel)
    value, headers = encode_barrier(barrier)
    assert len(value) == 18
    assert headers == [(BARRIER_HEADER, value)]
    assert decode_barrier(value) == barrier
    assert channel_of(value) == channel
    assert is_barrier(headers)


def test_barrier_layout_is_big_endian_channel_then_id_then_trigger_time() -> None:
    value, _ = encode_barrier(
        Barrier(checkpoint_id=0x0102030405060708, channel=0x0A0B, triggered_at_ms=0x11)
    )
    assert value == bytes([0x0A, 0x0B, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0x11])


def test_barrier_header_value_is_the_value_itself() -> None:
    value, headers = encode_barrier(Barrier(9, 3))
    ((name, header_value),) = headers
    assert name == BARRIER_HEADER
    assert isinstance(header_value, bytes)
    assert decode_barrier(header_value) == Barrier(9, 3)
    assert header_value == value


@pytest.mark.parametrize(
    "barrier", [Barrier(0, MAX_CHANNELS), Barrier(0, -1), Barrier(I64_MAX + 1, 0)]
)
def test_barrier_out_of_range_is_rejected(barrier: Barrier) -> None:
    with pytest.raises(struct.error):
        encode_barrier(barrier)


@pytest.mark.parametrize("value", [b"", b"\x00", bytes(9), bytes(10), bytes(19)])
def test_decode_barrier_of_wrong_length_raises(value: bytes) -> None:
    with pytest.raises(struct.error):
        decode_barrier(value)


def test_barrier_is_a_frozen_value() -> None:
    b = Barrier(checkpoint_id=3, channel=1)
    assert b == Barrier(3, 1)
    assert b != Barrier(1, 3)
    assert hash(b) == hash(Barrier(3, 1))
    assert len({b, Barrier(3, 1), Barrier(3, 2)}) == 2
    with pytest.raises(FrozenInstanceError):
        b.channel = 2  # type: ignore[misc]
    assert not hasattr(b, "__dict__")  # slots


# --- counts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "count"),
    [
        (0, 0),
        (0, 1),
        (1, -1),
        (5, 1_000_000),
        (MAX_CHANNELS - 1, I64_MAX),
        (MAX_CHANNELS - 1, I64_MIN),
    ],
)
def test_count_round_trip(channel: int, count: int) -> None:
    value = encode_count(channel, count)
    assert len(value) == 10
    assert decode_count(value) == (channel, count)
    assert channel_of(value) == channel


def test_count_layout_is_big_endian() -> None:
    assert encode_count(1, 2) == b"\x00\x01" + b"\x00" * 7 + b"\x02"
    assert encode_count(0, -1) == b"\x00\x00" + b"\xff" * 8


def test_count_random_round_trips() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        channel = rng.randrange(MAX_CHANNELS)
        count = rng.randint(I64_MIN, I64_MAX)
        assert decode_count(encode_count(channel, count)) == (channel, count)


@pytest.mark.parametrize(
    ("channel", "count"),
    [(MAX_CHANNELS, 0), (-1, 0), (0, I64_MAX + 1), (0, I64_MIN - 1)],
)
def test_count_out_of_range_is_rejected(channel: int, count: int) -> None:
    with pytest.raises(struct.error):
        encode_count(channel, count)


@pytest.mark.parametrize("value", [b"", bytes(2), bytes(9), bytes(11)])
def test_decode_count_of_wrong_length_raises(value: bytes) -> None:
    with pytest.raises(struct.error):
        decode_count(value)


def test_channel_of_reads_only_the_prefix() -> None:
    assert channel_of(b"\x01\x02") == 0x0102
    assert channel_of(b"\x00\x07 and whatever follows") == 7
    assert channel_of(b"\xff\xff\x00") == MAX_CHANNELS - 1
    with pytest.raises(struct.error):
        channel_of(b"\x01")
    with pytest.raises(struct.error):
        channel_of(b"")


def test_barrier_and_count_share_the_channel_prefix() -> None:
    value, _ = encode_barrier(Barrier(checkpoint_id=42, channel=9))
    assert channel_of(value) == channel_of(encode_count(9, 42)) == 9


# --- is_barrier ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        [(BARRIER_HEADER, b"x")],
        [(BARRIER_HEADER, None)],
        [("trace-id", b"1"), (BARRIER_HEADER, b"")],
        [("a", b"1"), ("b", None), (BARRIER_HEADER, b"v"), ("c", b"")],
        {BARRIER_HEADER: b"x"},
        {"other": b"1", BARRIER_HEADER: None},
    ],
)
def test_is_barrier_true(headers: list[tuple[str, Any]] | dict[str, Any]) -> None:
    assert is_barrier(headers) is True


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        {},
        [("trace-id", b"1")],
        [("Processor.Barrier", b"x")],  # names are case-sensitive
        [("processor.barrier ", b"x")],
        [("processor", b"barrier")],
        [("x", BARRIER_HEADER.encode())],  # the name as a value does not count
        {"processor.barriers": b"x"},
        {"x": BARRIER_HEADER},
    ],
)
def test_is_barrier_false(headers: list[tuple[str, Any]] | dict[str, Any] | None) -> None:
    assert is_barrier(headers) is False


def test_is_barrier_accepts_tuples_of_headers() -> None:
    # confluent-kafka hands out a list; a tuple of pairs must behave the same.
    headers: Any = ((BARRIER_HEADER, b"1"),)
    assert is_barrier(headers) is True
