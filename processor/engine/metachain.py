"""A stage's operators on records with metadata (`processor.engine.meta`).

Where a pipeline carries metadata (the planner's ``Node.meta``), items hold a `Meta` where
a timed pipeline holds the event time (which the meta holds too): an unkeyed item is
``(meta, value)``, a keyed one ``((key text, meta), value)``. map, filter, flat_map and
key_by run here on such items, calling their function with ``(value, meta)`` when given
``meta=True`` (`run_of`); items are converted between the two forms where a node takes
another than its parent makes:

- to a node that takes no metadata (an aggregation, a window, a sink, a branch that needs
  none): the items its parent would make without metadata, event time kept in a timed one
  (`strip`);
- to a node that takes it from one that makes new records (an aggregation, ``process``, a
  window or join): a fresh meta with the key, and the event time if the records have one
  (`fresh`).

Pipelines without metadata never come here: the operators' compiler
(`processor.engine.operators`) puts a `StripMeta` or `WithMeta` only on a node that takes or
gets them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from processor.api.node import FilterNode, FunctionNode, KeyByNode, MapNode, SourceNode
from processor.api.ops import event_time, key_of
from processor.api.streams import Node
from processor.engine.context import StageContext
from processor.engine.meta import Headers, Meta, from_shuffle

__all__ = [
    "fresh",
    "from_shuffle",
    "into_merge",
    "key_and_headers",
    "newest",
    "run_of",
    "source_items",
    "strip",
]


def source_items(
    ctx: StageContext,
    head: SourceNode,
    values: list[Any],
    metas: list[Meta] | None,
    times: list[int] | None,
) -> list[tuple[Meta, Any]]:
    """A source stage's items with metadata: the source task's metas (or, given values
    alone, metas with the Kafka ``times`` if any), their ``timestamp`` set by the source's
    timestamp function if it has one (a failure is a dead record)."""
    if metas is None:
        stamps = times if times is not None else [None] * len(values)
        metas = [Meta(timestamp=t) for t in stamps]
    fn = head.timestamp_fn
    if fn is None:
        return list(zip(metas, values, strict=True))
    items = []
    for meta, value in zip(metas, values, strict=True):
        try:
            meta.timestamp = event_time(fn, value)
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(head, exc, value)
            continue
        items.append((meta, value))
    return items


def newest(items: list[tuple[Meta, Any]]) -> int | None:
    """The highest event time among a timed source's items (None if none)."""
    return max((m.timestamp for m, _ in items if m.timestamp is not None), default=None)


def key_and_headers(first: Any) -> tuple[str, Headers]:
    """Of a keyed meta item's ``(key text, meta)``: the key text and the headers."""
    return first[0], first[1].headers


# What a node that takes items with metadata does with a batch of them (``keyed``: items
# ``((key text, meta), value)``): its output, None for a key_by (into its shuffle).
MetaRun = Callable[[StageContext, list[Any], bool, bool], "list[Any] | None"]


def run_of(node: FunctionNode) -> MetaRun:
    """How ``node``, a map, filter, flat_map or key_by, runs on items with metadata: chosen
    once, when its operator is built (a ``process`` takes them itself)."""
    if isinstance(node, KeyByNode):
        return partial(_key_by, node)
    if isinstance(node, MapNode):
        return partial(_map, node)
    if isinstance(node, FilterNode):
        return partial(_filter, node)
    return partial(_flat_map, node)


def into_merge(sender: Node, merge: Node, batch: list[Any]) -> list[Any]:
    """``sender``'s items in the form of ``merge``'s, where one carries metadata and the other
    not (an input that makes new records, an aggregation, has none)."""
    if sender.meta:
        return strip(batch, sender.keyed, sender.timed)
    return fresh(batch, sender.timed)


def strip(batch: list[Any], keyed: bool, timed: bool) -> list[Any]:
    if keyed:
        if timed:
            return [((k[0], k[1].timestamp), v) for k, v in batch]
        return [(k[0], v) for k, v in batch]
    if timed:
        return [(m.timestamp, v) for m, v in batch]
    return [v for _, v in batch]


def fresh(batch: list[Any], timed: bool) -> list[Any]:
    """Keyed items of an operator that made them: with a meta of their key (and time)."""
    if timed:
        return [((k[0], Meta(key_of(k[0]), k[1])), v) for k, v in batch]
    return [((t, Meta(key_of(t))), v) for t, v in batch]


def _call(node: FunctionNode) -> Callable[[Any, Meta], Any]:
    fn = node.fn
    if node.uses_meta:
        return fn
    return lambda value, _meta: fn(value)


def _map(
    node: FunctionNode, ctx: StageContext, batch: list[Any], keyed: bool, quiet: bool
) -> list[Any]:
    """map over items with metadata; each output keeps its record's."""
    fn = _call(node)
    out: list[Any] = []
    append = out.append
    for first, value in batch:
        try:
            append((first, fn(value, first[1] if keyed else first)))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(node, exc, value)
    return out


def _filter(
    node: FunctionNode, ctx: StageContext, batch: list[Any], keyed: bool, quiet: bool
) -> list[Any]:
    """filter over items with metadata."""
    fn = _call(node)
    out: list[Any] = []
    append = out.append
    for first, value in batch:
        try:
            if fn(value, first[1] if keyed else first):
                append((first, value))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(node, exc, value)
    return out


def _flat_map(
    node: FunctionNode, ctx: StageContext, batch: list[Any], keyed: bool, quiet: bool
) -> list[Any]:
    """flat_map over items with metadata; each output keeps its record's."""
    fn = _call(node)
    out: list[Any] = []
    for first, value in batch:
        try:
            out.extend([(first, o) for o in fn(value, first[1] if keyed else first)])
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(node, exc, value)
    return out


def _key_by(
    node: FunctionNode, ctx: StageContext, batch: list[Any], keyed: bool, quiet: bool
) -> None:
    """Key records with metadata; ship their metadata if the stage after takes it, else
    their event time if timed, else nothing (a combiner may then merge them)."""
    fn = _call(node)
    keys: list[Any] = []
    values: list[Any] = []
    metas: list[Meta] = []
    for first, value in batch:
        meta = first[1] if keyed else first
        try:
            key = fn(value, meta)
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(node, exc, value)
            continue
        keys.append(key)
        values.append(value)
        metas.append(meta)
    if quiet:
        return
    shuffle = ctx.shuffles[node.name]
    if node.meta:
        shuffle.add_meta(keys, values, metas)
    elif node.timed:  # a timed source's records all have their time
        shuffle.add(keys, values, times=[m.timestamp for m in metas])  # type: ignore[misc]
    else:
        shuffle.add(keys, values)
