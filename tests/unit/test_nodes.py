"""The graph's nodes (`processor.api.node`): every kind the API builds is a class of its own,
holding only its own fields, its kind's name a class attribute."""

from __future__ import annotations

import dataclasses
from typing import Any

from processor import Pipeline
from processor.api import node as nodes
from processor.api.dataflow import KeyedStream, Stream
from processor.api.node import Node

# What every node has: its place in the graph, and what the planner decides on it.
_COMMON = {"name", "parent", "keyed", "children", "timed", "meta", "meta_in"}
_FUNCTION = {"fn", "uses_meta"}
_AGGREGATION = {"ttl_ms", "emit"}

# Each kind's class, and the fields it holds besides the common ones.
_OWN: dict[str, tuple[type[Node], set[str]]] = {
    "source": (
        nodes.SourceNode,
        {"topic", "value_format", "key_format", "timestamp_fn", "out_of_orderness_ms", "idle_ms"},
    ),
    "map": (nodes.MapNode, _FUNCTION),
    "filter": (nodes.FilterNode, _FUNCTION),
    "flat_map": (nodes.FlatMapNode, {*_FUNCTION, "batch_fn"}),
    "key_by": (nodes.KeyByNode, {*_FUNCTION, "topic", "feeds", "prune", "local"}),
    "window": (nodes.WindowNode, {"size_ms", "slide_ms", "gap_ms", "lateness_ms", "bounds"}),
    "count": (nodes.CountNode, _AGGREGATION),
    "sum": (nodes.SumNode, _AGGREGATION),
    "reduce": (nodes.ReduceNode, {*_AGGREGATION, "fn"}),
    "aggregate": (nodes.AggregateNode, {*_AGGREGATION, "fn", "initial", "merge"}),
    "process": (
        nodes.ProcessNode,
        {"ttl_ms", "fn", "on_timer", "processing_time", "headers"},
    ),
    "join": (nodes.JoinNode, {"other", "within_ms"}),
    "merge": (nodes.MergeNode, {"merged"}),
    "loop": (nodes.LoopNode, {"merged"}),
    "sink": (nodes.SinkNode, {"topic", "sink_spec"}),
    "sink_postgres": (nodes.PostgresSinkNode, {"postgres"}),
}


def _every_kind() -> Pipeline:
    """A pipeline with a node of every kind the API builds."""
    p = Pipeline()
    words: Stream[Any] = p.source("lines").flat_map(str.split).filter(bool).map(str.lower)
    keyed = words.key_by(str)
    keyed.window(size_ms=10).count().sink("per_window")
    keyed.merge(p.source("more").key_by(str)).sum().sink("sums")
    p.source("a").key_by(str).reduce(max).sink("maxima")
    p.source("b").key_by(str).aggregate(0, lambda a, _v: a + 1, lambda a, b: a + b).sink("n")
    p.source("c").key_by(str).process(lambda v, _s: [v]).sink("same")
    left, right = p.source("l").key_by(str), p.source("r").key_by(str)
    left.join(right, within_ms=5).sink("pairs")

    def body(s: KeyedStream[Any, Any]) -> tuple[KeyedStream[Any, Any], Stream[Any]]:
        return s.filter(bool).key_by(str), s.map(len)

    p.source("edges").key_by(str).iterate(body).sink("hops")
    p.source("rows").sink_postgres("postgresql://db/app", "t", ["k"], lambda k, v: {"k": k})
    return p


def test_every_kind_the_api_builds_is_a_class_with_only_its_own_fields() -> None:
    p = _every_kind()
    assert {n.kind for n in p.nodes} == set(_OWN)
    for node in p.nodes:
        kind, own = _OWN[node.kind]
        assert type(node) is kind, node
        assert {f.name for f in dataclasses.fields(node)} == _COMMON | own, node
        assert "kind" not in vars(node), node  # the class's, not the node's
    source = p.sources[0]
    assert not hasattr(source, "size_ms") and not hasattr(source, "fn")
    assert not hasattr(p.sinks[0], "value_format")


def test_each_kind_has_its_own_class_and_name() -> None:
    kinds: list[type[Node]] = []
    stack = list(Node.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "kind" in vars(cls) and cls.__module__ == nodes.__name__:
            kinds.append(cls)
    assert {cls.kind: cls for cls in kinds} == {k: cls for k, (cls, _) in _OWN.items()}


def test_what_a_node_is_decides_what_it_derives() -> None:
    p = Pipeline()
    keyed = p.source("in").key_by(str)
    per_key = keyed.count(emit="record").node
    windowed = keyed.window(size_ms=10).count().node
    assert isinstance(per_key, nodes.CountNode) and isinstance(windowed, nodes.CountNode)
    assert per_key.aggregated and per_key.per_record and not per_key.windowed
    assert windowed.windowed and not windowed.aggregated and windowed.window is not None
    merged = keyed.merge(p.source("other").key_by(str)).node
    assert [n.name for n in merged.inputs] == ["in.key_by", "other.key_by"]
    assert repr(per_key) == "<count in.key_by.count>"
