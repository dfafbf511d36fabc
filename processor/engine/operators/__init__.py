"""A stage's operators, compiled from its graph: one small class per kind of node, built once
when a `processor.engine.chain.StageChain` is, each running its batches and emitting to its
children (`base.Operator`). The chain is the wiring: it feeds the head's batches in and holds
the operators' state at the epoch's end.

- `base`: `Operator`, and `Pass` (head, merge, loop, window), `IntoMerge`, `Unknown`;
- `stateless`: map, filter, flat_map, key_by, and the adapters of inputs with event time or
  metadata (`StripTime`, `StripTimeTouch`, `StripMeta`, `WithMeta`);
- `sink`: sinks;
- `keyed`: aggregations (per checkpoint, per record), ``process``, per-window operators and
  the join.

`compile_operators` decides, per node and from the graph alone (its kind, whether its input
is keyed, timed or carries metadata), which operator runs it: the per-batch path reads no
``Node.kind``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from processor.api.streams import Node
from processor.engine.operators.base import IntoMerge, Operator, Pass, Unknown
from processor.engine.operators.keyed import (
    Aggregate,
    Join,
    PerRecordAggregate,
    Process,
    Window,
)
from processor.engine.operators.sink import PostgresRows, Sink
from processor.engine.operators.stateless import (
    Filter,
    FlatMap,
    KeyBy,
    KeyByTimed,
    Map,
    StripMeta,
    StripTime,
    StripTimeTouch,
    WithMeta,
)
from processor.plan.stages import Stage

if TYPE_CHECKING:
    from processor.engine.chain import StageChain

__all__ = ["Operator", "compile_operators", "running"]

# Nodes that pass on every input's items: a merge, a loop (its input and feedback).
UNIONS = frozenset({"merge", "loop"})


def compile_operators(chain: StageChain, stage: Stage) -> dict[Node, Operator]:
    """The operator of every node ``chain`` runs (its stage's head, its nodes, and what they
    feed within the stage), wired to their children's."""
    ops: dict[Node, Operator] = {}
    stack = [stage.head, *stage.nodes]
    while stack:
        node = stack.pop()
        if node in ops:
            continue
        ops[node] = _operator(chain, stage, node)
        if _feeds_stage(stage, node):
            stack.extend(node.children)
    for node, op in ops.items():
        if _feeds_stage(stage, node):
            op.children = [_edge(chain, node, ops[child]) for child in node.children]
        _share_children(op)
    return ops


def running(op: Operator) -> Operator:
    """The operator that runs ``op``'s node, inside the adapters of its input."""
    inner = getattr(op, "inner", None)
    return op if not isinstance(inner, Operator) else running(inner)


def _feeds_stage(stage: Stage, node: Node) -> bool:
    """Whether ``node``'s children are in ``stage``: not a key_by's into a shuffle (they are
    the next stage's), except the head's and a loop's feedback."""
    return node.kind != "key_by" or node is stage.head or node.feeds is not None


def _edge(chain: StageChain, sender: Node, child: Operator) -> Operator:
    """What ``sender``'s batches go to, to reach ``child``."""
    if child.node.kind in UNIONS and sender.meta != child.node.meta:
        return IntoMerge(chain, sender, child)
    return child


def _share_children(op: Operator) -> None:
    """An adapter's inner operator emits to the adapter's children."""
    inner = getattr(op, "inner", None)
    while isinstance(inner, Operator):
        inner.children = op.children
        inner = getattr(inner, "inner", None)


def _operator(chain: StageChain, stage: Stage, node: Node) -> Operator:
    parent = node.parent
    if node is stage.head and stage.is_join:
        return Join(chain, node)
    if parent is None or node is stage.head or node.kind in UNIONS:
        return Pass(chain, node)
    plain = _plain(chain, node, parent)
    # Records with metadata (`processor.engine.metachain`): of a pipeline that uses it only.
    if parent.meta and not node.meta_in:
        return StripMeta(chain, plain, parent)
    if parent.meta or node.meta_in:
        return WithMeta(chain, plain, parent)
    return plain


def _plain(chain: StageChain, node: Node, parent: Node) -> Operator:
    """The operator of ``node`` where its parent's items have no metadata."""
    kind, keyed = node.kind, parent.keyed
    if parent.timed:
        if kind in ("map", "filter", "flat_map"):
            keyed = True  # the time rides along like a key
        elif kind == "key_by":
            return KeyByTimed(chain, node)
        elif kind == "window":
            return Pass(chain, node)
        elif kind == "process" and not node.windowed:  # its output keeps the time
            return Process(chain, node)
        elif node.windowed:
            return Window(chain, node)
        else:  # aggregations, sinks: without the time
            inner = _of_kind(chain, node, keyed)
            expiry = getattr(inner, "expiry", None)  # a TTL from the records' times
            if node.aggregated and expiry is not None:
                return StripTimeTouch(chain, inner, keyed, expiry)
            return StripTime(chain, inner, keyed)
    return _of_kind(chain, node, keyed)


def _of_kind(chain: StageChain, node: Node, keyed: bool) -> Operator:
    """The operator of ``node`` over untimed items (``keyed``: ``(key, value)`` pairs)."""
    kind = node.kind
    if kind == "map":
        return Map(chain, node, keyed)
    if kind == "filter":
        return Filter(chain, node, keyed)
    if kind == "flat_map":
        return FlatMap(chain, node, keyed)
    if kind == "key_by":
        return KeyBy(chain, node, keyed)
    if node.aggregated:
        if node.per_record:
            return PerRecordAggregate(chain, node)
        return Aggregate(chain, node)
    if kind == "process":
        return Process(chain, node)
    if kind == "sink":
        return Sink(chain, node, keyed)
    if kind == "sink_postgres":
        return PostgresRows(chain, node, keyed)
    return Unknown(chain, node)
