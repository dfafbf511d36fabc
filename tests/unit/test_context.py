"""`StageContext`: what a stage's operators share instead of their chain (state reads with
the TTL's filter, dead records and their source origin, the output the task takes)."""

from __future__ import annotations

from typing import Any

from processor import Pipeline
from processor.api.node import MapNode, Node
from processor.api.ops import key_text
from processor.engine.chain import StageChain
from processor.engine.context import ExpiredFilter, StageContext
from processor.engine.operators import Operator
from processor.jobs.wordcount import wordcount_pipeline
from processor.plan.stages import plan
from processor.testing import MemoryState


def _node(name: str) -> Node:
    return MapNode(name, None, False, fn=str)


def test_a_dead_record_names_the_source_value_it_is() -> None:
    ctx = StageContext(MemoryState(), False, "job.late", 1000)
    values: list[Any] = [{"a": 1}, {"b": 2}]
    ctx.source_batch(values)
    ctx.fail(_node("m"), ValueError("no"), values[1])
    ctx.fail(_node("m"), ValueError("derived"), {"c": 3})  # not one of the batch's values
    ctx.source_batch(None)
    ctx.fail(_node("m"), ValueError("later"), values[0])  # after the batch: no origin
    dead = ctx.take_dead()
    assert [(d.operator, d.origin) for d in dead] == [("m", 1), ("m", None), ("m", None)]
    assert dead[0].error == "ValueError: no" and ctx.dead == []


def test_expired_keys_read_as_missing_until_the_flush() -> None:
    state = MemoryState()
    state.write({b"op\0a": b"1", b"op\0b": b"2"})
    ctx = StageContext(state, False, "", 1000)
    assert ctx.reader is state  # no filter until a key expires
    shared = ctx.filtered()  # an operator with a TTL reads through one from the start
    ctx.expire([b"op\0a"])
    assert isinstance(ctx.reader, ExpiredFilter)
    for reader in (ctx.reader, shared):
        assert reader.get_many([b"op\0a", b"op\0b"]) == [None, b"2"]
    ctx.expired.clear()  # what the flush does once it wrote the deletions
    assert shared.get_many([b"op\0a"]) == [b"1"]


def test_a_value_that_cannot_be_stored_is_dead_naming_its_key() -> None:
    ctx = StageContext(MemoryState(), False, "", 1000)
    assert ctx.encode(_node("agg"), "k", {"n": 1}) == b'{"n":1}'
    assert ctx.encode(_node("agg"), key_text(7), {1, 2}) is None
    assert ctx.encode(_node("agg"), "\x00{", {3}) is None  # a key text that does not decode
    assert [d.operator for d in ctx.dead] == ["agg", "agg"] and ctx.output_buffered == 2
    assert ctx.dead[0].error.startswith("state of key 7 not stored: value {1, 2}")
    assert "state of key '\\x00{' not stored" in ctx.dead[1].error


def test_no_operator_holds_its_chain() -> None:
    p = Pipeline()
    events = p.source("in", value="json", timestamp=lambda v: v["ts"])
    keyed = events.key_by(lambda v: v["k"])
    keyed.window(size_ms=1000).count().sink("windows")
    keyed.process(lambda v, s: [v], on_timer=lambda at, s: []).sink("processed")
    for compiled in (plan(p), plan(wordcount_pipeline("job", "lines", "counts"))):
        for stage in compiled.stages:
            partitions = {n.name: 1 for n in stage.shuffles}
            chain = StageChain(compiled, stage, 0, MemoryState(), partitions)
            for op in chain.operators.by_node.values():
                assert op.ctx is chain.context
                assert not [v for v in _fields(op) if isinstance(v, StageChain)], op


def _fields(op: Operator) -> list[Any]:
    slots = [s for cls in type(op).__mro__ for s in getattr(cls, "__slots__", ())]
    return [getattr(op, s, None) for s in slots]
