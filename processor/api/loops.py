"""Loops: `KeyedStream.iterate`, a stream whose records come back to it.

``stream.iterate(body)`` adds a node of kind ``"loop"`` after ``stream`` and calls
``body(loop)`` once. The body returns ``(feedback, output)``: ``feedback`` ends in its own
``key_by`` (the *feedback key_by*, perhaps followed by map, filter or flat_map), and its
records re-enter the loop under that key. The loop node is a union of the loop's input and
the feedback's last node, as a ``merge`` is; the feedback key_by is not a stage head: it
writes into the loop stage's feedback topic ``<job>.<loop>.feedback`` instead of a shuffle
(`processor.worker.keyed_feedback` reads it back). The nodes after it run in the loop's
stage when a fed-back record is read, before the loop node's children.

A loop runs in one stage (the one of ``stream``): no other ``key_by`` between the loop and
its feedback key_by. Windows, joins and event time in that stage, and record metadata, are
refused (`processor.plan.stages`): a watermark would have to go around the loop.
docs/loops.md has the rules and why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from processor.errors import PipelineError

if TYPE_CHECKING:
    from processor.api.node import Node
    from processor.api.streams import KeyedStream, Stream

# What may run on a fed-back record between the feedback key_by and the loop.
_AFTER_KEY_BY = frozenset({"map", "filter", "flat_map"})


def iterate(
    stream: KeyedStream, body: Callable[[KeyedStream], Any], name: str | None = None
) -> Stream:
    """`KeyedStream.iterate`: the loop node, the body built on it, the back-edge closed."""
    from processor.api.streams import KeyedStream, Stream

    if not callable(body):
        raise PipelineError(f"iterate(body): expected a function, got {type(body).__name__}")
    pipeline = stream.pipeline
    loop = pipeline._child(stream.node, "loop", name, keyed=True)
    where = f"iterate {loop.name!r}"
    result = body(KeyedStream(pipeline, loop))
    if not (isinstance(result, tuple) and len(result) == 2):
        raise PipelineError(f"{where}: body must return (feedback, output), two streams")
    feedback, output = result
    for role, s in (("feedback", feedback), ("output", output)):
        if not isinstance(s, Stream) or s.pipeline is not pipeline:
            raise PipelineError(f"{where}: the body's {role} must be a stream of this pipeline")
    assert isinstance(output, Stream)
    if not isinstance(feedback, KeyedStream):
        raise PipelineError(f"{where}: the feedback must be a keyed stream (end it in key_by)")
    key_by = feedback_key_by(loop, feedback.node, where)
    if not _downstream(output.node, loop):
        raise PipelineError(f"{where}: the output is not downstream of the loop's stream")
    key_by.feeds = loop
    loop.merged = [feedback.node]
    feedback.node.children.append(loop)
    return output


def feedback_key_by(loop: Node, end: Node, where: str) -> Node:
    """The key_by that ``end`` (the body's feedback) re-keys its records with: the last one
    on its way from ``loop``, with only map, filter and flat_map after it and no other
    key_by before it (the body runs in one stage)."""
    node: Node | None = end
    key_by: Node | None = None
    while node is not None and node is not loop:
        if node.kind == "key_by":
            if key_by is not None:
                raise PipelineError(
                    f"{where}: a loop's body runs in one stage: no key_by in it before the "
                    f"feedback's own ({node.name!r} is one)"
                )
            key_by = node
        elif node.kind == "loop":
            raise PipelineError(f"{where}: a loop inside a loop's body is not supported")
        elif node.merged:
            raise PipelineError(f"{where}: no merge on the feedback's way ({node.name!r})")
        elif key_by is None and node.kind not in _AFTER_KEY_BY:
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
