"""Loops: `KeyedStream.iterate`, a stream whose records come back to it.

``stream.iterate(body)`` adds a `LoopNode` after ``stream`` (`open_loop`) and
calls ``body(loop)`` once. The body returns ``(feedback, output)``: ``feedback`` ends in its
own ``key_by`` (the *feedback key_by*, perhaps followed by map, filter or flat_map), and its
records re-enter the loop under that key (`close_loop`). The loop node is a union of the
loop's input and the feedback's last node, as a ``merge`` is; the feedback key_by is not a
stage head: it writes into the loop stage's feedback topic ``<job>.<loop>.feedback`` instead
of a shuffle (`processor.worker.keyed_feedback` reads it back). The nodes after it run in the
loop's stage when a fed-back record is read, before the loop node's children.

A loop runs in one stage (the one of ``stream``): no other ``key_by`` between the loop and
its feedback key_by. Windows, joins and event time in that stage, and record metadata, are
refused (`processor.plan.stages`): a watermark would have to go around the loop.
docs/loops.md has the rules and why. A body::

    def body(hops):
        stepped = hops.process(step)            # per key, with state
        back = stepped.filter(lambda m: "to" in m).key_by(lambda m: m["to"])
        return back, stepped.filter(lambda m: "done" in m)

    p.source("edges", value="json").key_by(lambda e: e["u"]).iterate(body)
"""

from __future__ import annotations

from typing import Any

from processor.api.graph import Graph
from processor.api.node import (
    FilterNode,
    FlatMapNode,
    KeyByNode,
    LoopNode,
    MapNode,
    Node,
    UnionNode,
)
from processor.errors import PipelineError

# What may run on a fed-back record between the feedback key_by and the loop.
_AFTER_KEY_BY = (MapNode, FilterNode, FlatMapNode)


def open_loop(graph: Graph, parent: Node, name: str | None) -> LoopNode:
    """The loop node after ``parent``: the body is built on it."""
    return graph.add(LoopNode(graph.named(parent, LoopNode, name), parent, True))


def iterate(
    graph: Graph, parent: Node, body: Any, name: str | None, stream: Any, keyed: Any
) -> Any:
    """`KeyedStream.iterate`: the loop after ``parent``, ``body`` called on it (a ``keyed``
    stream), the result checked, ``(feedback, output)``: both streams (of class ``stream``)
    of ``graph``, the feedback a ``keyed`` one; closes the loop, returns ``output``."""
    if not callable(body):
        raise PipelineError(f"iterate(body): expected a function, got {type(body).__name__}")
    loop = open_loop(graph, parent, name)
    where = f"iterate {loop.name!r}"
    result = body(keyed(graph, loop))
    if not (isinstance(result, tuple) and len(result) == 2):
        raise PipelineError(f"{where}: body must return (feedback, output), two streams")
    feedback, output = result
    for role, s in (("feedback", feedback), ("output", output)):
        if not isinstance(s, stream) or s.graph is not graph:
            raise PipelineError(f"{where}: the body's {role} must be a stream of this pipeline")
    if not isinstance(feedback, keyed):
        raise PipelineError(f"{where}: the feedback must be a keyed stream (end it in key_by)")
    close_loop(loop, feedback.node, output.node)
    return output


def close_loop(loop: LoopNode, feedback: Node, output: Node) -> None:
    """The back-edge from the body's ``feedback`` (its last node, keyed) into ``loop``;
    ``output`` must be downstream of the loop."""
    where = f"iterate {loop.name!r}"
    key_by = feedback_key_by(loop, feedback, where)
    if not _downstream(output, loop):
        raise PipelineError(f"{where}: the output is not downstream of the loop's stream")
    key_by.feeds = loop
    loop.merged = [feedback]
    feedback.children.append(loop)


def feedback_key_by(loop: LoopNode, end: Node, where: str) -> KeyByNode:
    """The key_by that ``end`` (the body's feedback) re-keys its records with: the last one
    on its way from ``loop``, with only map, filter and flat_map after it and no other
    key_by before it (the body runs in one stage)."""
    node: Node | None = end
    key_by: KeyByNode | None = None
    while node is not None and node is not loop:
        if isinstance(node, KeyByNode):
            if key_by is not None:
                raise PipelineError(
                    f"{where}: a loop's body runs in one stage: no key_by in it before the "
                    f"feedback's own ({node.name!r} is one)"
                )
            key_by = node
        elif isinstance(node, LoopNode):
            raise PipelineError(f"{where}: a loop inside a loop's body is not supported")
        elif isinstance(node, UnionNode) and node.merged:
            raise PipelineError(f"{where}: no merge on the feedback's way ({node.name!r})")
        elif key_by is None and not isinstance(node, _AFTER_KEY_BY):
            raise PipelineError(
                f"{where}: the feedback must end in its own key_by (then map, filter or "
                f"flat_map at most): {node.name!r} is a {node.kind}"
            )
        node = node.parent
    if node is None:
        raise PipelineError(f"{where}: the feedback is not downstream of the loop's stream")
    if key_by is None:
        raise PipelineError(
            f"{where}: the feedback must end in its own key_by: its records re-enter the loop "
            "under that key (feedback.key_by(...))"
        )
    return key_by


def _downstream(node: Node, loop: Node) -> bool:
    """Whether ``loop``'s records reach ``node`` (following every input)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current is loop:
            return True
        if id(current) in seen:
            continue
        seen.add(id(current))
        stack.extend(current.inputs)
    return False
