"""A stage's operators, compiled from its graph: one small class per kind of node, built once
when a `processor.engine.chain.StageChain` is, each running its batches and emitting to its
children (`base.Operator`). The chain is the wiring: it feeds the head's batches in and holds
the operators' state at the epoch's end.

- `base`: `Operator`, and `Pass` (head, merge, loop, window), `IntoMerge`, `Unknown`;
- `stateless`: map, filter, flat_map, key_by, and the adapters of inputs with event time or
  metadata (`StripTime`, `StripTimeTouch`, `StripMeta`, `WithMeta`);
- `sink`: sinks;
- `aggregate`: aggregations (per checkpoint, per record); `process`: ``process``;
  `windowed`: per-window operators and the join.

`compile_operators` decides, per node and from the graph alone (its kind, whether its input
is keyed, timed or carries metadata), which operator runs it: the per-batch path asks no
node what it is. `StageOperators` holds them by node and by what the epoch's end, the
watermark and the clock act on. Every operator gets the stage's `StageContext` (state reads,
dead records, output: `processor.engine.context`), never the chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from processor.api import node as nodes
from processor.api.ops import merger
from processor.api.streams import Node
from processor.engine.context import StageContext
from processor.engine.operators.aggregate import Aggregate, PerRecordAggregate
from processor.engine.operators.base import IntoMerge, Operator, Pass, Unknown
from processor.engine.operators.process import Process
from processor.engine.operators.sink import PostgresRows, Sink
from processor.engine.operators.stateless import (
    Filter,
    FlatMap,
    KeyBy,
    KeyByTimed,
    LocalKeyBy,
    Map,
    StripMeta,
    StripTime,
    StripTimeTouch,
    WithMeta,
)
from processor.engine.operators.windowed import Join, Window
from processor.plan.stages import Stage

__all__ = ["Operator", "StageOperators", "compile_operators", "running"]


def compile_operators(ctx: StageContext, stage: Stage) -> dict[Node, Operator]:
    """The operator of every node a task of ``stage`` runs (its head, its nodes, and what
    they feed within the stage), wired to their children's."""
    ops: dict[Node, Operator] = {}
    stack = [stage.head, *stage.nodes]
    while stack:
        node = stack.pop()
        if node in ops:
            continue
        ops[node] = _operator(ctx, stage, node)
        if _feeds_stage(stage, node):
            stack.extend(node.children)
    for node, op in ops.items():
        if _feeds_stage(stage, node):
            op.children = [_edge(ctx, node, ops[child]) for child in node.children]
        _share_children(op)
    return ops


Keeper = PerRecordAggregate | Process | Window | Join  # state other than the aggregations'


class StageOperators:
    """The operators of a task of ``stage``: by node (`by_node`), and by what the epoch's
    end, the watermark and the clock act on, in graph order."""

    def __init__(self, ctx: StageContext, stage: Stage) -> None:
        self.by_node = compile_operators(ctx, stage)
        head = self.by_node[stage.head]
        self.join = head if isinstance(head, Join) else None  # a join stage's head
        # The operators that run the stage's nodes (inside their input adapters).
        self.runs = [running(self.by_node[n]) for n in stage.nodes]
        runs = self.runs
        self.aggregates = [op for op in runs if isinstance(op, Aggregate)]
        self.per_record = [op for op in runs if isinstance(op, PerRecordAggregate)]
        self.processes = [op for op in runs if isinstance(op, Process)]
        self.windows = [op for op in runs if isinstance(op, Window)]
        # What keeps state other than the aggregations, in the order it is written at flush.
        self.keepers: list[Keeper] = [*self.per_record, *self.processes, *self.windows]
        if self.join is not None:
            self.keepers.append(self.join)
        # The aggregation a combined shuffle record's partials go to, and how they merge.
        self.combiner: tuple[Aggregate, Callable[[Any, Any], Any]] | None = None
        combiner = None if stage.combiner is None else running(self.by_node[stage.combiner])
        if isinstance(combiner, Aggregate):
            self.combiner = (combiner, merger(combiner.node))

    @property
    def pending(self) -> int:
        """The keys the aggregations hold for the flush (see `StageChain.pending`)."""
        return sum(len(op.dirty) for op in self.aggregates) + sum(
            op.pending for op in self.per_record
        )


def running(op: Operator) -> Operator:
    """The operator that runs ``op``'s node, inside the adapters of its input."""
    inner = getattr(op, "inner", None)
    return op if not isinstance(inner, Operator) else running(inner)


def _feeds_stage(stage: Stage, node: Node) -> bool:
    """Whether ``node``'s children are in ``stage``: not a key_by's into a shuffle (they are
    the next stage's), except the head's and a loop's feedback."""
    if not isinstance(node, nodes.KeyByNode):
        return True
    return node is stage.head or node.feeds is not None or node.local is not None


def _edge(ctx: StageContext, sender: Node, child: Operator) -> Operator:
    """What ``sender``'s batches go to, to reach ``child``."""
    # A union (merge, loop) passes on every input's items.
    if isinstance(child.node, nodes.UnionNode) and sender.meta != child.node.meta:
        return IntoMerge(ctx, sender, child)
    return child


def _share_children(op: Operator) -> None:
    """An adapter's inner operator emits to the adapter's children."""
    inner = getattr(op, "inner", None)
    while isinstance(inner, Operator):
        inner.children = op.children
        inner = getattr(inner, "inner", None)


def _operator(ctx: StageContext, stage: Stage, node: Node) -> Operator:
    parent = node.parent
    if node is stage.head and isinstance(node, nodes.JoinNode):
        return Join(ctx, node)
    if parent is None or node is stage.head or isinstance(node, nodes.UnionNode):
        return Pass(ctx, node)
    if isinstance(node, nodes.KeyByNode) and node.local is not None:
        return LocalKeyBy(ctx, node)  # its input: the source's items, with metadata
    plain = _plain(ctx, node, parent)
    # Records with metadata (`processor.engine.metachain`): of a pipeline that uses it only.
    if parent.meta and not node.meta_in:
        return StripMeta(ctx, plain, parent)
    if parent.meta or node.meta_in:
        return WithMeta(ctx, plain, parent)
    return plain


def _plain(ctx: StageContext, node: Node, parent: Node) -> Operator:
    """The operator of ``node`` where its parent's items have no metadata."""
    keyed = parent.keyed
    if not parent.timed:
        return _of_kind(ctx, node, keyed)
    if isinstance(node, nodes.KeyByNode):
        return KeyByTimed(ctx, node)
    if isinstance(node, nodes.FunctionNode):  # map, filter, flat_map
        return _of_kind(ctx, node, True)  # the time rides along like a key
    if isinstance(node, nodes.WindowNode):
        return Pass(ctx, node)
    if isinstance(node, nodes.PerKeyNode) and node.windowed:
        return Window(ctx, node)
    if isinstance(node, nodes.ProcessNode):  # its output keeps the time
        return Process(ctx, node)
    # aggregations, sinks: without the time
    inner = _of_kind(ctx, node, keyed)
    expiry = getattr(inner, "expiry", None)  # a TTL from the records' times
    if isinstance(node, nodes.AggregationNode) and expiry is not None:
        return StripTimeTouch(ctx, inner, keyed, expiry)
    return StripTime(ctx, inner, keyed)


def _of_kind(ctx: StageContext, node: Node, keyed: bool) -> Operator:
    """The operator of ``node`` over untimed items (``keyed``: ``(key, value)`` pairs)."""
    if isinstance(node, nodes.MapNode):
        return Map(ctx, node, keyed)
    if isinstance(node, nodes.FilterNode):
        return Filter(ctx, node, keyed)
    if isinstance(node, nodes.FlatMapNode):
        return FlatMap(ctx, node, keyed)
    if isinstance(node, nodes.KeyByNode):
        return KeyBy(ctx, node, keyed)
    if isinstance(node, nodes.AggregationNode) and node.aggregated:
        if node.per_record:
            return PerRecordAggregate(ctx, node)
        return Aggregate(ctx, node)
    if isinstance(node, nodes.ProcessNode):
        return Process(ctx, node)
    if isinstance(node, nodes.SinkNode):
        return Sink(ctx, node, keyed)
    if isinstance(node, nodes.PostgresSinkNode):
        return PostgresRows(ctx, node, keyed)
    return Unknown(ctx, node)
