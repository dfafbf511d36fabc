"""The nodes of the per-key operators, with their arguments checked: the aggregations
(count, sum, reduce, aggregate), ``process``, ``window`` and ``join``.

`processor.api.dataflow`'s streams call these and wrap the node in a typed stream; the
operator after a ``window`` node (a `processor.api.dataflow.WindowedStream`'s) is per key and
window, which refuses what a window cannot do (timers, a TTL, an update per record).

``ttl_ms`` (per key only): a key whose state has not been updated for that long is deleted
(`processor.engine.expiry`; docs/state-ttl.md).
"""

from __future__ import annotations

from typing import Any

from processor.api.args import check_callable, check_emit, check_ms, check_ttl
from processor.api.graph import Graph
from processor.api.node import (
    AggregateNode,
    CountNode,
    JoinNode,
    KeyByNode,
    Node,
    ProcessNode,
    ReduceNode,
    SumNode,
    WindowNode,
)
from processor.errors import PipelineError


def aggregation(
    graph: Graph,
    parent: Node,
    kind: type[CountNode] | type[SumNode],
    name: str | None,
    emit: Any,
    ttl_ms: Any,
) -> CountNode | SumNode:
    """count or sum after ``parent`` (a keyed node or a window)."""
    checked_emit, ttl = check_emit(emit, kind.kind), check_ttl(ttl_ms, kind.kind)
    _refuse_on_window(parent, kind.kind, ttl, checked_emit)
    node = kind(graph.named(parent, kind, name), parent, True, emit=checked_emit, ttl_ms=ttl)
    return graph.add(node)


def reduce(
    graph: Graph, parent: Node, fn: Any, name: str | None, emit: Any, ttl_ms: Any
) -> ReduceNode:
    """reduce after ``parent`` (a keyed node or a window)."""
    checked_emit, ttl = check_emit(emit, "reduce"), check_ttl(ttl_ms, "reduce")
    fn = check_callable(fn, "reduce")
    _refuse_on_window(parent, "reduce", ttl, checked_emit)
    named = graph.named(parent, ReduceNode, name)
    return graph.add(ReduceNode(named, parent, True, emit=checked_emit, ttl_ms=ttl, fn=fn))


def aggregate(
    graph: Graph,
    parent: Node,
    initial: Any,
    add: Any,
    merge: Any,
    name: str | None,
    emit: Any,
    ttl_ms: Any,
) -> AggregateNode:
    """aggregate after ``parent`` (a keyed node or a window)."""
    checked_emit, ttl = check_emit(emit, "aggregate"), check_ttl(ttl_ms, "aggregate")
    add = check_callable(add, "aggregate")
    if merge is not None:
        merge = check_callable(merge, "aggregate merge")
    if isinstance(parent, WindowNode) and parent.session and merge is None:
        raise PipelineError("aggregate on session windows needs merge= (sessions merge)")
    _refuse_on_window(parent, "aggregate", ttl, checked_emit)
    node = AggregateNode(
        graph.named(parent, AggregateNode, name),
        parent,
        True,
        emit=checked_emit,
        ttl_ms=ttl,
        fn=add,
        initial=initial,
        merge=merge,
    )
    return graph.add(node)


def process(
    graph: Graph,
    parent: Node,
    fn: Any,
    on_timer: Any,
    processing_time: Any,
    name: str | None,
    ttl_ms: Any,
    headers: Any,
) -> ProcessNode:
    """A process after ``parent`` (a keyed node or a window)."""
    window = parent if isinstance(parent, WindowNode) else None
    timer = None if on_timer is None else check_callable(on_timer, "process on_timer")
    if timer is not None and window is not None:
        raise PipelineError(
            "process(on_timer=...) on windows: a window's state ends with the window; "
            "set timers in a process on the keyed stream instead"
        )
    if processing_time and timer is None:
        raise PipelineError("process(processing_time=True) needs on_timer=")
    if headers is not None and not isinstance(headers, bool):
        raise PipelineError("process(headers=...): True, False or left out")
    if headers and window is not None:
        raise PipelineError(
            "process(headers=True) on windows: a window's process sees no headers; read "
            "them in a process before the window"
        )
    fn = check_callable(fn, "process")
    ttl = check_ttl(ttl_ms, "process")
    if window is not None and window.session:
        raise PipelineError("process on session windows: sessions merge, their state cannot")
    _refuse_on_window(parent, "process", ttl, "checkpoint")
    node = ProcessNode(
        graph.named(parent, ProcessNode, name),
        parent,
        True,
        ttl_ms=ttl,
        fn=fn,
        on_timer=timer,
        processing_time=bool(processing_time),
        headers=headers,
    )
    return graph.add(node)


def _refuse_on_window(parent: Node, kind: str, ttl_ms: int, emit: str) -> None:
    """What a per-key operator after a window (``parent``) cannot have."""
    if not isinstance(parent, WindowNode):
        return
    if ttl_ms:
        raise PipelineError(
            f"{kind}(ttl_ms=...) on a window: a window's state is deleted when it closes "
            "(for a TTL, aggregate without the window)"
        )
    if emit == "record":
        raise PipelineError(
            f'{kind}(emit="record") on a window: a window emits once, when it closes '
            "(for an update per record, aggregate without the window)"
        )


def window(
    graph: Graph,
    parent: Node,
    size_ms: Any,
    slide_ms: Any,
    gap_ms: Any,
    lateness_ms: Any,
    name: str | None,
    bounds: Any,
) -> WindowNode:
    """A window node after the keyed ``parent``: tumbling, hopping or session."""
    where = f"window(size_ms={size_ms}, slide_ms={slide_ms}, gap_ms={gap_ms})"
    named = graph.named(parent, WindowNode, name)
    node = WindowNode(named, parent, True)
    if gap_ms is not None:
        if size_ms is not None or slide_ms is not None:
            raise PipelineError(f"{where}: a session window takes gap_ms alone")
        node.gap_ms = check_ms(gap_ms, f"{where} gap_ms", positive=True)
    else:
        if size_ms is None:
            raise PipelineError(f"{where}: give size_ms (or gap_ms for session windows)")
        node.size_ms = check_ms(size_ms, f"{where} size_ms", positive=True)
        if slide_ms is not None:
            node.slide_ms = check_ms(slide_ms, f"{where} slide_ms", positive=True)
            if node.slide_ms > node.size_ms:
                raise PipelineError(f"{where}: slide_ms larger than size_ms skips records")
    node.lateness_ms = check_ms(lateness_ms, f"{where} lateness_ms")
    if not isinstance(bounds, bool):
        raise PipelineError(f"{where}: bounds must be True or False")
    node.bounds = bounds
    return graph.add(node)


def join(graph: Graph, left: Node, right: Node, within_ms: Any, name: str | None) -> JoinNode:
    """A join of two key_by nodes, each used for nothing else."""
    for side in (left, right):
        if not isinstance(side, KeyByNode) or side.children:
            raise PipelineError(
                f"join: {side.name!r} must be a key_by with no other use (join right "
                "after key_by; key_by again for another branch)"
            )
    if left is right:
        raise PipelineError("join: a stream cannot join itself")
    assert isinstance(right, KeyByNode)
    named = graph.named(left, JoinNode, name)
    within = None if within_ms is None else check_ms(within_ms, "join within_ms")
    node = graph.add(JoinNode(named, left, True, other=right, within_ms=within))
    right.children.append(node)
    return node
