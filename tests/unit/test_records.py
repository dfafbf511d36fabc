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
    decode_counts,
    encode_barrier,
    encode_counts,
    is_barrier,
    shuffle_partition,
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
    "counts",
    [
        {},
        {"a": 1},
        {"the": 12, "word": -3, "zero": 0},
        {"ünïcödé": 5, "日本語": 2, "emoji😀": 1},
        {"big": I64_MAX, "small": I64_MIN, "bigger": 2**80},
        {'quote"back\\slash': 1, "tab\tnl\n": 2},
    ],
)
@pytest.mark.parametrize("channel", [0, 1, MAX_CHANNELS - 1])
def test_counts_round_trip(channel: int, counts: dict[str, int]) -> None:
    value = encode_counts(channel, counts)
    assert decode_counts(value) == (channel, counts)
    assert channel_of(value) == channel


def test_counts_random_round_trips() -> None:
    rng = random.Random(11)
    alphabet = "abcxyzäöü日本 _-0123456789"
    for _ in range(300):
        channel = rng.randrange(MAX_CHANNELS)
        counts = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))): rng.randint(
                I64_MIN, I64_MAX
            )
            for _ in range(rng.randint(0, 40))
        }
        assert decode_counts(encode_counts(channel, counts)) == (channel, counts)


def test_counts_layout_is_the_channel_then_json() -> None:
    assert encode_counts(1, {"a": 2}) == b'\x00\x01{"a":2}'
    assert encode_counts(258, {}) == b"\x01\x02{}"


def test_channel_out_of_range_is_rejected() -> None:
    for channel in (MAX_CHANNELS, -1):
        with pytest.raises(struct.error):
            encode_counts(channel, {"a": 1})


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00",
        b"\x00\x01",
        b"\x00\x01{",
        b"\x00\x01[1, 2]",
        b'\x00\x01{"a": "1"}',
        b'\x00\x01{"a": 1.5}',
        b'\x00\x01{"a": true}',
        b'\x00\x01{"a": null}',
        b"\x00\x01\xff\xfe",
        b"\x00\x01" + bytes(8),  # the old per-key format
    ],
)
def test_decode_counts_rejects_what_a_source_did_not_write(value: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        decode_counts(value)


def test_shuffle_partition_is_fixed() -> None:
    # A key's state lives in the task of its partition: the mapping must never change
    # (between processes, runs or versions). CRC-32 of the UTF-8 key, modulo partitions.
    assert [shuffle_partition(k, 8) for k in (b"the", b"word", b"count", b"")] == [
        0x3C456DE6 % 8,
        0xC3F17511 % 8,
        0x85D94462 % 8,
        0,
    ]
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randint(1, 20)) for _ in range(2000)]
    for n in (1, 4, 8, 13):
        spread = [shuffle_partition(k, n) for k in keys]
        assert set(spread) == set(range(n))


def test_channel_of_reads_only_the_prefix() -> None:
    assert channel_of(b"\x01\x02") == 0x0102
    assert channel_of(b"\x00\x07 and whatever follows") == 7
    assert channel_of(b"\xff\xff\x00") == MAX_CHANNELS - 1
    with pytest.raises(struct.error):
        channel_of(b"\x01")
    with pytest.raises(struct.error):
        channel_of(b"")


def test_barrier_and_counts_share_the_channel_prefix() -> None:
    value, _ = encode_barrier(Barrier(checkpoint_id=42, channel=9))
    assert channel_of(value) == channel_of(encode_counts(9, {"w": 42})) == 9


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
