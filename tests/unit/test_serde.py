"""processor.serde: the built-in formats, Avro (plain and in the Confluent wire format against
a local stand-in of the registry's REST API), resolution, and dead records on failures."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor import Pipeline, PipelineError
from processor.serde import BYTES, JSON, TEXT, Avro, Serde, loads_all, resolve
from processor.serde.codec import RecordError, Unavailable, decode, serde_dumps
from tests.registry_stand_in import StandInRegistry, count_serializer_calls, serve_stand_in

CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}],
}


def test_builtins_round_trip_and_refuse_the_wrong_kind() -> None:
    assert JSON.loads(JSON.dumps({"a": [1, "é"]})) == {"a": [1, "é"]}
    assert TEXT.loads(TEXT.dumps("hé")) == "hé"
    assert BYTES.loads(BYTES.dumps(b"\0\xff")) == b"\0\xff"
    with pytest.raises(RecordError, match="not JSON") as info:
        JSON.loads(b"{")
    assert info.value.reason == "not_json"
    with pytest.raises(RecordError, match="takes str"):
        TEXT.dumps(1)
    with pytest.raises(RecordError, match="takes bytes"):
        BYTES.dumps("x")
    with pytest.raises(RecordError, match="not UTF-8"):
        TEXT.dumps("\ud800")


def test_resolve_names_serdes_and_refuses_the_rest() -> None:
    assert resolve("json", "here") is JSON
    assert resolve(TEXT, "here") is TEXT
    avro = Avro(CLICK)
    assert resolve(avro, "here", "topic") is avro  # plain Avro: the same for every topic
    with pytest.raises(PipelineError, match="sink"):
        resolve("xml", "sink('t')")
    with pytest.raises(PipelineError, match="loads"):
        resolve(object(), "sink('t')")
    assert isinstance(avro, Serde)


def test_plain_avro_round_trip_is_fastavro_binary() -> None:
    avro = Avro(json.dumps(CLICK))
    raw = avro.dumps({"page": "a", "n": 3})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(CLICK), {"page": "a", "n": 3})
    assert raw == out.getvalue() == b"\x02a\x06"
    assert avro.loads(raw) == {"page": "a", "n": 3}


def test_avro_failures_are_dead_records() -> None:
    avro = Avro(CLICK)
    with pytest.raises(RecordError, match="Avro cannot encode") as info:
        serde_dumps(avro, {"page": "a"})  # n missing
    assert info.value.reason == "serde_error"
    with pytest.raises(RecordError, match="Avro cannot decode"):
        decode(avro, b"\x02")  # cut short
    with pytest.raises(RecordError, match="bytes left"):
        decode(avro, b"\x02a\x06\x00")  # a record of something else
    assert loads_all(avro, [b"\x02a\x06", b"\x02"]) is None
    assert loads_all(avro, [b"\x02a\x06"]) == [{"page": "a", "n": 3}]
    with pytest.raises(PipelineError, match="not an Avro schema"):
        Avro({"type": "record"})


class _Broken:
    def loads(self, raw: bytes) -> Any:
        raise KeyError("nope")

    def dumps(self, value: Any) -> Any:
        return "not bytes"


def test_a_serde_that_raises_or_returns_no_bytes_makes_dead_records() -> None:
    with pytest.raises(RecordError, match="_Broken cannot decode it: KeyError") as info:
        decode(_Broken(), b"x")
    assert info.value.reason == "serde_error"
    with pytest.raises(RecordError, match="returned str, not bytes"):
        serde_dumps(_Broken(), 1)


# -- the Confluent wire format, against the registry's REST API answered locally -------------


@pytest.fixture
def registry() -> Iterator[str]:
    with serve_stand_in() as url:
        yield url


def test_registry_wire_format_magic_byte_schema_id_body(registry: str) -> None:
    avro = resolve(Avro(CLICK, registry_url=registry), "sink('clicks')", "clicks")
    raw = avro.dumps({"page": "a", "n": 3})
    assert raw[0] == 0
    (schema_id,) = struct.unpack(">I", raw[1:5])
    assert schema_id == 100
    assert raw[5:] == Avro(CLICK).dumps({"page": "a", "n": 3})
    assert any(c.startswith("POST /subjects/clicks-value/versions") for c in StandInRegistry.calls)
    # A reader of its own (a fresh client) fetches the writer's schema by the id.
    reader = resolve(Avro(CLICK, registry_url=registry), "source('clicks')", "clicks")
    assert reader.loads(raw) == {"page": "a", "n": 3}
    assert "GET /schemas/ids/100" in [c.split("?")[0] for c in StandInRegistry.calls]


def test_registry_records_are_written_as_confluents_serializer_writes_them(
    registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first record, the wire format's 5 bytes and the compiled writer's body: the
    same bytes as confluent-kafka's own serializer, which writes only the first record and
    those the writer is not sure of (a bool where a long goes)."""
    theirs = AvroSerializer(
        SchemaRegistryClient({"url": registry}),
        json.dumps(CLICK),
        conf={"subject.name.strategy": topic_subject_name_strategy},
    )
    at_clicks = SerializationContext("clicks", MessageField.VALUE)
    values = [{"page": "p" * (i % 70), "n": (i - 50) * 7919**3} for i in range(100)]
    values[40]["n"] = True
    expected = [theirs(v, at_clicks) for v in values]
    calls = count_serializer_calls(monkeypatch)
    ours = Avro(CLICK, registry_url=registry).for_topic("clicks")
    assert [ours.dumps(v) for v in values] == expected
    assert len(calls) == 2  # the first record, and the bool


def test_registry_failures(registry: str) -> None:
    avro = Avro(CLICK, registry_url=registry).for_topic("clicks")
    with pytest.raises(RecordError, match="wire format"):
        decode(avro, b"\x02a\x06")  # plain Avro, no magic byte
    with pytest.raises(RecordError, match="cannot decode"):
        decode(avro, b"\0\0\0\0\x07\x02a\x06")  # an id the registry does not have
    with pytest.raises(RuntimeError, match="for_topic"):
        Avro(CLICK, registry_url=registry).dumps({"page": "a", "n": 1})
    StandInRegistry.down = True
    with pytest.raises(Unavailable):  # not the record's fault: the task retries
        serde_dumps(avro, {"page": "a", "n": 1})


def test_registry_away_is_unavailable_not_dead() -> None:
    # registry_config reaches the client: no retries here, so the test is quick.
    avro = Avro(CLICK, registry_url="http://127.0.0.1:9", registry_config={"max.retries": 0})
    avro = avro.for_topic("clicks")
    with pytest.raises(Unavailable):
        serde_dumps(avro, {"page": "a", "n": 1})


def test_source_takes_a_serde_and_keeps_builtins_by_name() -> None:
    p = Pipeline()
    avro = Avro(CLICK)
    p.source("a", value=avro)
    p.source("b", value=JSON)
    assert p.sources[0].value_format is avro
    assert p.sources[1].value_format == "json"  # the engine's fast path
    with pytest.raises(PipelineError, match="value must be one of"):
        p.source("c", value="xml")  # type: ignore[call-overload]
    with pytest.raises(PipelineError, match="serde"):
        p.source("d", value=42)  # type: ignore[call-overload]


def test_a_registry_urls_credentials_are_never_shown() -> None:
    """Issue #41 item 5: ``http://user:pass@host`` in the serde's repr and in the Unavailable
    message (a task's failure line) shows the password as ***."""
    from processor.serde.avro import Avro
    from processor.serde.codec import Unavailable

    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    serde = Avro(schema, registry_url="http://app:s3cret@127.0.0.1:9/")
    assert "s3cret" not in repr(serde) and "app:***@" in repr(serde)
    try:
        serde.for_topic("topic").dumps({"a": 1})
    except Unavailable as exc:
        assert "s3cret" not in str(exc) and "***" in str(exc)
    else:
        raise AssertionError("nothing listens on port 9: the registry must be unavailable")
