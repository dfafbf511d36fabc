"""Reading the Confluent wire format (`Avro(registry_url=...).loads`): records whose writer
schema has no rules are read without confluent-kafka's `AvroDeserializer` (processor/serde/
avro.py, `_loads_registered`), and must come out exactly as it makes them, under the same
schema and under evolved ones; a writer schema with rules, or of ``bytes``, still goes through
it. Against the local stand-in of the registry's REST API (tests/registry_stand_in.py)."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.serde import Avro
from processor.serde.codec import RecordError, decode
from tests.registry_stand_in import StandInRegistry, count_deserializer_calls, serve_stand_in

RICH = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "qty", "type": {"type": "array", "items": "int"}},
        {"name": "tags", "type": {"type": "map", "values": "double"}},
        {"name": "hash", "type": {"type": "fixed", "name": "H", "size": 4}},
        {"name": "blob", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [{"name": "city", "type": "string"}, {"name": "n", "type": "int"}],
            },
        },
    ],
}


def _rich(i: int) -> dict[str, Any]:
    return {
        "id": (i - 20) * 7919**4,
        "note": None if i % 3 else f"n{i}é",
        "kind": "AB"[i % 2],
        "qty": list(range(i % 5)),
        "tags": {f"t{j}": j / 3 for j in range(i % 4)},
        "hash": bytes([i % 256] * 4),
        "blob": bytes(range(i % 9)),
        "ok": i % 2 == 0,
        "ratio": i / 8,
        "at": 1796628768695 + i,
        "ship": {"city": "c" * (i % 11), "n": -i},
    }


# (writer schema, reader schema, values written): the same schema, and evolutions that
# Avro's resolution reads (a field dropped, one added with a default, int read as long).
_OLD = {"type": "record", "name": "Click", "fields": [
    {"name": "page", "type": "string"}, {"name": "n", "type": "int"},
    {"name": "gone", "type": "string"}]}  # fmt: skip
_NEW = {"type": "record", "name": "Click", "fields": [
    {"name": "page", "type": "string"}, {"name": "n", "type": "long"},
    {"name": "ref", "type": ["null", "string"], "default": None},
    {"name": "w", "type": "double", "default": 1.5}]}  # fmt: skip
CASES: list[tuple[Any, Any, list[Any]]] = [
    (RICH, RICH, [_rich(i) for i in range(40)]),
    (_OLD, _NEW, [{"page": f"p{i}", "n": -i * 1000, "gone": "x"} for i in range(20)]),
    ("string", {"type": "string"}, ["", "a", "é" * 30]),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "double"}, [[1, -2], []]),
]


@pytest.fixture
def registry() -> Iterator[str]:
    with serve_stand_in() as url:
        yield url


def _framed(schema_id: int, schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\0" + struct.pack(">I", schema_id) + out.getvalue()


def _theirs(url: str, reader: Any) -> Any:
    deserializer = AvroDeserializer(
        SchemaRegistryClient({"url": url}),
        json.dumps(reader),
        conf={"subject.name.strategy": topic_subject_name_strategy},
    )
    ctx = SerializationContext("orders", MessageField.VALUE)
    return lambda raw: deserializer(raw, ctx)


def test_records_read_as_confluents_deserializer_reads_them(
    registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i, (writer, reader, values) in enumerate(CASES):
        StandInRegistry.schemas[i + 1] = json.dumps(writer)
        raws = [_framed(i + 1, writer, v) for v in values]
        expected = [_theirs(registry, reader)(raw) for raw in raws]
        calls = count_deserializer_calls(monkeypatch)
        ours = Avro(reader, registry_url=registry).for_topic("orders")
        assert [ours.loads(raw) for raw in raws] == expected, (writer, reader)
        assert calls == [], "records of a writer schema without rules read without it"
        monkeypatch.undo()


def test_a_writer_schema_with_rules_goes_through_the_deserializer(
    registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its encoding rules run on read: one of a type no executor serves fails the record in
    the deserializer (dead here), where reading the body alone would have let it through."""
    rule = {"name": "enc", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "NOPE"}
    StandInRegistry.schemas[1] = json.dumps(_NEW)
    StandInRegistry.rule_sets[1] = {"encodingRules": [rule]}
    raw = _framed(1, _NEW, {"page": "p", "n": 1, "ref": None, "w": 0.5})
    calls = count_deserializer_calls(monkeypatch)
    ours = Avro(_NEW, registry_url=registry).for_topic("orders")
    with pytest.raises(RecordError, match="cannot decode"):
        decode(ours, raw)
    assert calls == [1]


def test_a_bytes_writers_body_is_handed_over_as_the_deserializer_does(
    registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    StandInRegistry.schemas[1] = '"bytes"'
    raw = b"\0\0\0\0\x01" + b"\x0ahello"  # the body as is, not Avro's length and bytes
    expected = _theirs(registry, {"type": "bytes"})(raw)
    assert expected == b"\x0ahello"
    calls = count_deserializer_calls(monkeypatch)
    assert Avro({"type": "bytes"}, registry_url=registry).for_topic("orders").loads(raw) == expected
    assert calls == [1]


def test_a_frame_with_no_body_is_dead(registry: str) -> None:
    StandInRegistry.schemas[1] = '"null"'
    ours = Avro({"type": "null"}, registry_url=registry).for_topic("orders")
    with pytest.raises(Exception, match="framing"):  # confluent-kafka's own error
        _theirs(registry, {"type": "null"})(b"\0\0\0\0\x01")
    with pytest.raises(RecordError, match="wire format"):
        decode(ours, b"\0\0\0\0\x01")
