"""Sinks with a key function, a value format, serde or function, and headers: what StageChain
writes for them, the dead records their failures make, and the defaults left on their path."""

from __future__ import annotations

from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.api.ops import key_text
from processor.api.streams import KeyedStream, Stream
from processor.engine.chain import StageChain
from processor.plan.stages import plan
from processor.serde import JSON, TEXT, Avro
from processor.serde.codec import Unavailable
from tests.reference import run
from tests.unit.test_chain import DictBackend

Out = tuple[
    dict[str, list[tuple[bytes | None, bytes]]],
    dict[str, list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]],
    list[tuple[str, str, str]],
]


def _source_run(p: Pipeline, values: list[Any]) -> Out:
    """The pipeline's source stage over ``values``, flushed: sinks, headed sinks, dead."""
    compiled = plan(p)
    stage = compiled.stages[0]
    chain = StageChain(compiled, stage, 0, DictBackend(), {n.name: 2 for n in stage.shuffles})
    chain.values(values)
    chain.flush()
    dead = [(d.operator, d.reason, d.error) for d in chain.take_dead()]
    return chain.take_sinks(), chain.take_headed(), dead


def _keyed_run(p: Pipeline, pairs: list[tuple[Any, Any]], max_record: int = 10**6) -> Out:
    """The pipeline's keyed stage (the second) over ``(key, value)`` pairs as one shuffle
    record, flushed."""
    compiled = plan(p)
    stage = compiled.stages[1]
    chain = StageChain(compiled, stage, 0, DictBackend(), {}, max_record_bytes=max_record)
    chain.shuffled([[key_text(k), v] for k, v in pairs])
    chain.flush()
    dead = [(d.operator, d.reason, d.error) for d in chain.take_dead()]
    return chain.take_sinks(), chain.take_headed(), dead


def _keyed(p: Pipeline) -> KeyedStream[Any, Any]:
    return p.source("in", value="json").key_by(lambda v: v["k"])


def test_defaults_have_no_spec_and_keep_the_fast_path() -> None:
    p = Pipeline()
    s = p.source("in", value="json")
    s.sink("a")
    s.sink("b", value="json", name="b")
    s.sink("b2", value=JSON, name="b2")
    assert [n.sink_spec for n in p.sinks] == [None, None, None]
    s.sink("c", value="text")
    s.sink("d", value=lambda k, v: b"")
    spec, fn_spec = p.sinks[3].sink_spec, p.sinks[4].sink_spec
    assert spec is not None and spec.serde is TEXT  # what a reader decodes it with
    assert fn_spec is not None and fn_spec.serde is None


def test_key_function_gets_the_users_key_and_returns_str_bytes_or_none() -> None:
    p = Pipeline()
    keyed = _keyed(p)
    seen: list[tuple[Any, Any]] = []

    def key(k: Any, v: Any) -> Any:
        seen.append((k, v))
        return {"s": f"{k}!", "b": b"\xff", "n": None}[v["as"]]

    keyed.sink("out", key=key)
    pairs = [(1, {"k": 1, "as": "s"}), ("x", {"k": "x", "as": "b"}), ([2], {"k": [2], "as": "n"})]
    sinks, headed, dead = _keyed_run(p, pairs)
    assert sinks["out"] == [
        (b"1!", b'{"k":1,"as":"s"}'),
        (b"\xff", b'{"k":"x","as":"b"}'),
        (None, b'{"k":[2],"as":"n"}'),
    ]
    assert [k for k, _ in seen] == [1, "x", [2]]  # the key as the user made it, not its text
    assert headed == {} and dead == []


def test_unkeyed_stream_key_function_gets_none() -> None:
    p = Pipeline()
    p.source("in", value="json").sink("out", key=lambda k, v: f"{k}:{v['id']}")
    sinks, _, dead = _source_run(p, [{"id": 1}])
    assert sinks["out"] == [(b"None:1", b'{"id":1}')] and dead == []


def test_value_formats_serdes_and_functions() -> None:
    p = Pipeline()
    s = p.source("in", value="json")
    s.map(lambda v: v["t"]).sink("text", value="text")
    s.map(lambda v: v["t"].encode()).sink("bytes", value="bytes")
    schema = {"type": "record", "name": "R", "fields": [{"name": "t", "type": "string"}]}
    s.sink("avro", value=Avro(schema))
    s.sink("fn", value=lambda k, v: f"{k}|{v['t']}".encode())
    sinks, _, dead = _source_run(p, [{"t": "hé"}])
    assert sinks["text"] == [(None, "hé".encode())]
    assert sinks["bytes"] == [(None, "hé".encode())]
    assert sinks["avro"] == [(None, Avro(schema).dumps({"t": "hé"}))]
    assert sinks["fn"] == [(None, "None|hé".encode())]
    assert dead == []


def test_headers_go_with_their_records_apart_from_the_plain_ones() -> None:
    p = Pipeline()
    keyed = _keyed(p)

    def headers(k: Any, v: Any) -> Any:
        return [("k", str(k)), ("raw", b"\x00")] if v["h"] else []

    keyed.sink("out", headers=headers)
    sinks, headed, dead = _keyed_run(p, [("a", {"k": "a", "h": True}), ("b", {"k": "b", "h": 0})])
    assert headed == {"out": [(b"a", b'{"k":"a","h":true}', [("k", b"a"), ("raw", b"\x00")])]}
    assert sinks == {"out": [(b"b", b'{"k":"b","h":0}')]}
    assert dead == []


def test_failing_functions_and_wrong_types_are_dead_records_never_a_crash() -> None:
    p = Pipeline()
    s = p.source("in", value="json")
    keys_out = {"ok": "ok", "int": 7, "surrogate": "\ud800"}
    s.sink("k", key=lambda k, v: keys_out[v["key"]], name="k")  # type: ignore[arg-type, return-value]
    values_out = {"ok": b"ok", "str": "str", "none": None}
    s.sink("v", value=lambda k, v: values_out[v["value"]], name="v")  # type: ignore[arg-type, return-value]
    headers_out = {"ok": [("a", b"1")], "int": [("a", 1)], "str": "x"}
    s.sink("h", headers=lambda k, v: headers_out[v["headers"]], name="h")  # type: ignore[arg-type, return-value]
    s.sink("t", value="text", name="t")
    values = [
        {"key": "ok", "value": "ok", "headers": "ok"},
        {"key": "int", "value": "str", "headers": "int"},
        {"key": "surrogate", "value": "none", "headers": "str"},
        {},  # KeyError in every function
    ]
    sinks, headed, dead = _source_run(p, values)
    assert [k for k, _ in sinks["k"]] == [b"ok"]
    assert [v for _, v in sinks["v"]] == [b"ok"]
    assert [h for _, _, h in headed["h"]] == [[("a", b"1")]]
    assert "t" not in sinks  # dicts are not str
    by_sink: dict[str, list[str]] = {}
    for operator, _, error in dead:
        by_sink.setdefault(operator, []).append(error)
    assert len(by_sink["k"]) == len(by_sink["v"]) == len(by_sink["h"]) == 3
    assert len(by_sink["t"]) == 4
    assert "key function returned int" in by_sink["k"][0]
    assert "not UTF-8" in by_sink["k"][1]
    assert by_sink["k"][2].startswith("KeyError")
    assert "value function returned str, not bytes" in by_sink["v"][0]
    assert "value function returned NoneType" in by_sink["v"][1]
    assert "header 'a': int, not bytes" in by_sink["h"][0]
    assert "headers function returned str" in by_sink["h"][1]


def test_a_record_too_large_with_its_headers_is_dead() -> None:
    p = Pipeline()
    _keyed(p).sink("out", headers=lambda k, v: [("pad", b"x" * v["pad"])])
    pairs = [("a", {"k": "a", "pad": 10}), ("b", {"k": "b", "pad": 2000})]
    _, headed, dead = _keyed_run(p, pairs, max_record=1000)
    assert [k for k, _, _ in headed["out"]] == [b"a"]
    assert [reason for _, reason, _ in dead] == ["oversized_record"]


@pytest.mark.parametrize("form", [list, tuple])  # a list of tuples is taken as it is
def test_headers_count_to_the_byte_in_a_records_size(form: Any) -> None:
    # key b"a" (1) + value b'{"k":"a","pad":N}' (19) + header "pad" (3) + N + 16: 1,000 at 961.
    p = Pipeline()
    _keyed(p).sink("out", headers=lambda k, v: [form(("pad", b"x" * v["pad"]))])
    pairs = [("a", {"k": "a", "pad": n}) for n in (961, 962)]
    _, headed, dead = _keyed_run(p, pairs, max_record=1000)
    assert [len(h[0][1]) for _, _, h in headed["out"]] == [961]
    assert [reason for _, reason, _ in dead] == ["oversized_record"]


def test_an_aggregation_into_a_sink_with_a_key_function_uses_it() -> None:
    # count().sink() has its own path at flush (word count's); a spec must leave it.
    p = Pipeline()
    _keyed(p).count().sink("out", key=lambda k, v: f"word:{k}")
    sinks, _, dead = _keyed_run(p, [("a", {"k": "a"}), ("a", {"k": "a"}), ("b", {})])
    assert sorted(sinks["out"]) == [(b"word:a", b"2"), (b"word:b", b"1")]
    assert dead == []


def test_the_reference_execution_encodes_sinks_the_same_way() -> None:
    p = Pipeline()
    keyed = _keyed(p)
    keyed.map(lambda v: v["v"]).sink(
        "out", key=lambda k, v: f"{k}-{v}", value=lambda k, v: str(v).encode()
    )
    inputs = {"in": [b'{"k": "a", "v": 1}', b'{"k": 2, "v": 3}', b'{"k": 3}']}
    result = run(p, inputs)
    assert result.sinks["out"].records == [(b"a-1", b"1"), (b"2-3", b"3")]
    assert [name for name, _ in result.dead] == ["in.key_by.map"]


def test_a_registry_away_fails_the_task_rather_than_dead_letter() -> None:
    class Away:
        def loads(self, raw: bytes) -> Any:
            raise Unavailable("registry down")

        def dumps(self, value: Any) -> bytes:
            raise Unavailable("registry down")

    p = Pipeline()
    p.source("in", value="json").sink("out", value=Away())
    with pytest.raises(Unavailable):
        _source_run(p, [1])


def test_sink_arguments_are_checked_when_the_pipeline_is_built() -> None:
    s: Stream[Any] = Pipeline().source("in")
    with pytest.raises(PipelineError, match="key: expected a function"):
        s.sink("out", key="user")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="headers: expected a function"):
        s.sink("out", headers=[("a", b"b")])  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="value"):
        s.sink("out", value="xml")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="value"):
        s.sink("out", value=3)  # type: ignore[arg-type]
    assert s.graph.sinks == []  # nothing half-made stays in the pipeline
