"""The compiled Avro writer (processor/serde/avro_writer.py) writes fastavro's bytes: on
random records of random schemas, on the edges of each type, and, for the values it is not
sure of, through `Avro.dumps`, which hands them to fastavro."""

from __future__ import annotations

import io
import math
import random
from typing import Any

import fastavro
import pytest

from processor.serde import Avro
from processor.serde.avro_writer import long_bytes, record_writer

KINDS = ("null", "boolean", "int", "long", "float", "double", "string", "bytes")
EDGE_INTS = [0, 1, -1, 63, 64, -64, -65, 8191, 8192, 16383, 16384, 2**21, -(2**31), 2**31 - 1]
EDGE_LONGS = [*EDGE_INTS, 2**31, 2**35 + 7, 1796628768695, 2**62, 2**63 - 1, -(2**63)]


def fastavro_bytes(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def a_value(kind: str, rng: random.Random) -> Any:
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([rng.choice(EDGE_INTS), rng.randint(-(2**31), 2**31 - 1)])
    if kind == "long":
        return rng.choice([rng.choice(EDGE_LONGS), rng.randint(-(2**63), 2**63 - 1)])
    if kind in ("float", "double"):
        return rng.choice([rng.uniform(-1e6, 1e6), 0.0, -0.0, math.inf, math.nan, 1e-300])
    size = rng.choice([0, 1, 5, 63, 64, 200, 8191, 8192, 20_000])
    if kind == "string":
        return "".join(rng.choice("aé€😀\0z") for _ in range(size // 4))
    return rng.randbytes(size)


def a_field(i: int, rng: random.Random) -> tuple[dict[str, Any], str]:
    kind = rng.choice(KINDS)
    field_type: Any = kind
    if kind != "null" and rng.random() < 0.3:
        field_type = ["null", kind] if rng.random() < 0.5 else [kind, "null"]
    elif rng.random() < 0.2:
        field_type = {"type": kind}
    return {"name": f"f{i}", "type": field_type}, kind


@pytest.mark.parametrize("seed", range(40))
def test_random_records_are_written_as_fastavro_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    fields = [a_field(i, rng) for i in range(rng.randint(1, 8))]
    schema = {"type": "record", "name": "R", "fields": [f for f, _ in fields]}
    write = record_writer(fastavro.parse_schema(schema))
    assert write is not None
    for _ in range(50):
        value = {}
        for field, kind in fields:
            nullable = isinstance(field["type"], list)
            value[field["name"]] = None if nullable and rng.random() < 0.3 else a_value(kind, rng)
        assert write(value) == fastavro_bytes(schema, value), value


@pytest.mark.parametrize("n", [*EDGE_LONGS, *(2**k + d for k in range(64) for d in (-1, 0))])
def test_each_long_is_zigzag_varint(n: int) -> None:
    if n > 2**63 - 1:
        return
    assert long_bytes(n) == fastavro_bytes("long", n)
    assert long_bytes(-n - 1) == fastavro_bytes("long", -n - 1)


def test_every_long_of_the_tables_is_zigzag_varint() -> None:
    """The lookups: each small int, and each 14-bit group where a varint ends."""
    for n in range(-(1 << 14), 1 << 14):
        assert long_bytes(n) == fastavro_bytes("long", n), n


ONE_OF_EACH = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "d", "type": "double"},
        {"name": "o", "type": ["null", "string"]},
    ],
}
GOOD = {"i": 1, "l": 2, "s": "x", "b": b"y", "d": 1.5, "o": None}


class Tally(int):
    pass


@pytest.mark.parametrize(
    "change",
    [
        {"i": True},  # a bool is an int to fastavro, not to the writer
        {"i": Tally(5)},
        {"l": 3.0},
        {"i": 2**31},  # out of an int's range
        {"l": 2**63},
        {"s": "\ud800"},  # a lone surrogate
        {"s": b"x"},
        {"b": "y"},
        {"d": 2},
        {"o": 5},
    ],
)
def test_values_it_is_not_sure_of_go_to_fastavro(change: dict[str, Any]) -> None:
    value = {**GOOD, **change}
    write = record_writer(fastavro.parse_schema(ONE_OF_EACH))
    assert write is not None
    with pytest.raises(Exception):  # noqa: B017 - any: Avro.dumps falls back on each
        write(value)
    try:
        expected: bytes | type[Exception] = fastavro_bytes(ONE_OF_EACH, value)
    except Exception as exc:  # noqa: BLE001
        expected = type(exc)
    if isinstance(expected, bytes):
        assert Avro(ONE_OF_EACH).dumps(value) == expected
    else:
        with pytest.raises(expected):
            Avro(ONE_OF_EACH).dumps(value)


def test_a_missing_field_takes_its_default_as_fastavro_does() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "long", "default": 7}],
    }
    assert Avro(schema).dumps({"a": 1}) == fastavro_bytes(schema, {"a": 1, "b": 7})


@pytest.mark.parametrize(
    "field_type",
    [
        {"type": "enum", "name": "E", "symbols": ["A"]},
        {"type": "array", "items": "long"},
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]},
        ["null", "long", "string"],
        ["long", "string"],
    ],
)
def test_other_field_types_are_left_to_fastavro(field_type: Any) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
    assert record_writer(fastavro.parse_schema(schema)) is None


def test_schemas_that_are_not_records_are_left_to_fastavro() -> None:
    assert record_writer(fastavro.parse_schema("long")) is None
    assert record_writer(fastavro.parse_schema({"type": "array", "items": "long"})) is None
    assert record_writer({"type": "record", "name": "R", "fields": []}) is None


def test_avro_dumps_writes_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed it is for: `Avro.dumps` of a record of primitives does not call fastavro."""
    avro = Avro(ONE_OF_EACH)
    expected = fastavro_bytes(ONE_OF_EACH, GOOD)
    calls = []
    real = fastavro.schemaless_writer

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fastavro, "schemaless_writer", counted)
    assert avro.dumps(GOOD) == expected
    assert calls == []
    avro.dumps({**GOOD, "i": True})
    assert calls == [1]
