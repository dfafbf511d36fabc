"""The operators a StageChain compiles from its graph (`processor.engine.operators`): one
class per kind of node, decided once, so that no batch asks a node what it is."""

from __future__ import annotations

from typing import Any, cast

import pytest

from processor import Pipeline
from processor.api.node import Node
from processor.engine.chain import StageChain
from processor.engine.operators import Operator, running
from processor.engine.operators.aggregate import Aggregate
from processor.engine.operators.base import Pass
from processor.engine.operators.sink import Sink
from processor.engine.operators.stateless import FlatMap, KeyBy, Map, StripMeta, WithMeta
from processor.jobs.wordcount import wordcount_pipeline
from processor.models.records import decode_shuffle
from processor.plan.stages import plan
from processor.testing import MemoryState


def _kinds(chain: StageChain) -> dict[str, type[Operator]]:
    return {node.name: type(op) for node, op in chain.operators.by_node.items()}


def test_word_count_compiles_to_one_operator_per_node_and_runs_without_reading_kinds() -> None:
    compiled = plan(wordcount_pipeline("job", "lines", "counts"))
    split_stage, count_stage = compiled.stages
    partitions = {split_stage.shuffles[0].name: 1}
    split = StageChain(compiled, split_stage, 0, MemoryState(), partitions)
    count = StageChain(compiled, count_stage, 0, MemoryState(), partitions)
    assert _kinds(split) == {"split": Pass, "words": FlatMap, "count": KeyBy}
    assert _kinds(count) == {"count": Pass, "counts": Aggregate, "output": Sink}
    counts = count.operators.by_node[count_stage.nodes[0]]
    assert isinstance(counts, Aggregate) and counts.plain_sink is count_stage.nodes[1]
    watched = {
        node: type(node) for node in [split_stage.head, *split_stage.nodes, *count_stage.nodes]
    }
    for node, kind in watched.items():
        node.__class__ = _unread(kind)
    try:
        split.values(["a b a", "B c"])
        split.flush()
        for _, value in split.shuffles["count"].take(0):
            count.shuffled(decode_shuffle(value)[1])
        count.flush()
    finally:
        for node, kind in watched.items():
            node.__class__ = kind
    assert sorted(count.take_sinks()["counts"]) == [(b"a", b"2"), (b"b", b"2"), (b"c", b"1")]


def _unread(kind: type[Node]) -> type[Node]:
    """``kind``, whose name no batch may read (a property outranks the class attribute)."""

    def unread(node: Node) -> Any:
        raise AssertionError("Node.kind read on the per-batch path")

    return cast("type[Node]", type(f"Unread{kind.__name__}", (kind,), {"kind": property(unread)}))


def test_metadata_adapters_are_compiled_only_where_records_carry_it() -> None:
    p = Pipeline()
    nums = p.source("n", value="json")
    tagged = nums.map(lambda v, meta: [v, meta.timestamp], meta=True, name="tag")
    tagged.sink("tagged", name="out")
    nums.map(lambda v: v + 1, name="plain").sink("plain", name="plain-out")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[0], 0, MemoryState(), {})
    ops = {node.name: op for node, op in chain.operators.by_node.items()}
    assert isinstance(ops["tag"], WithMeta) and isinstance(running(ops["tag"]), Map)
    # Records carry metadata from the source through "tag" (which uses it); the nodes that
    # take none get them without it.
    assert isinstance(ops["out"], StripMeta) and isinstance(running(ops["out"]), Sink)
    assert isinstance(ops["plain"], StripMeta) and isinstance(running(ops["plain"]), Map)
    assert isinstance(ops["plain-out"], Sink)
    chain.values([1, 2], times=[10, 20])
    sinks: dict[str, Any] = chain.take_sinks()
    assert sinks == {
        "tagged": [(None, b"[1,10]"), (None, b"[2,20]")],
        "plain": [(None, b"2"), (None, b"3")],
    }


def test_an_operator_of_no_known_kind_fails_on_its_first_batch() -> None:
    p = Pipeline()
    p.source("n", value="json").map(lambda v: v, name="m").sink("out")
    compiled = plan(p)
    mapped = compiled.stages[0].nodes[0]
    mapped.__class__ = _Unheard
    chain = StageChain(compiled, compiled.stages[0], 0, MemoryState(), {})
    with pytest.raises(ValueError, match="unknown operator"):
        chain.values([1])


class _Unheard(Node):
    """A kind of node no operator runs."""

    kind = "unheard-of"
