"""The operators that keep no state: map, filter, flat_map and key_by (into the `ShuffleOut`
of the stage downstream; a keyed source's `LocalKeyBy` on into its own stage), and the
adapters the compiler puts before an operator whose input has another form: `StripTime`
(timed items into an operator that drops the time; `StripTimeTouch` into an aggregation
with a TTL, whose deadlines count from those times), `StripMeta` and `WithMeta` (items with
metadata: `processor.engine.metachain`).

Each runs a whole batch in one comprehension (``keyed``: items are ``(key, value)`` pairs; in
a timed pipeline the time rides along like a key); when a user function raises, the batch is
run again one record at a time (`each`) and only the failing records are dead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain as flatten
from typing import Any

from processor.api.node import FlatMapNode, FunctionNode, KeyByNode
from processor.api.ops import TAGGED, key_text
from processor.api.streams import Node
from processor.engine import metachain
from processor.engine.context import StageContext
from processor.engine.expiry import Expiry
from processor.engine.operators.base import Operator
from processor.serde.codec import RecordError


class _Function(Operator):
    """An operator of a user function over values (``keyed``: of ``(key, value)`` items)."""

    __slots__ = ("fn", "keyed")

    def __init__(self, ctx: StageContext, node: FunctionNode, keyed: bool) -> None:
        super().__init__(ctx, node)
        self.fn: Callable[[Any], Any] = node.fn
        self.keyed = keyed


class Map(_Function):
    """``map``: one output per value."""

    __slots__ = ()

    def apply(self, batch: list[Any], quiet: bool) -> None:
        fn = self.fn
        try:
            out = [(k, fn(v)) for k, v in batch] if self.keyed else list(map(fn, batch))
        except Exception:  # noqa: BLE001 - find the failing records one by one
            out = each(self.ctx, self.node, batch, self.keyed, lambda v: [fn(v)], fast=False)
        self.emit(out, quiet)


class Filter(_Function):
    """``filter``: the values its function is true of."""

    __slots__ = ()

    def apply(self, batch: list[Any], quiet: bool) -> None:
        fn = self.fn
        try:
            out = [kv for kv in batch if fn(kv[1])] if self.keyed else list(filter(fn, batch))
        except Exception:  # noqa: BLE001 - find the failing records one by one
            out = each(
                self.ctx, self.node, batch, self.keyed, lambda v: [v] if fn(v) else [], False
            )
        self.emit(out, quiet)


class FlatMap(_Function):
    """``flat_map``: any number of outputs per value; unkeyed with a batch function
    (``FlatMapNode.batch_fn``: word count's regex) the whole batch in one call."""

    __slots__ = ("batch_fn",)

    def __init__(self, ctx: StageContext, node: FlatMapNode, keyed: bool) -> None:
        super().__init__(ctx, node, keyed)
        self.batch_fn = None if keyed else node.batch_fn

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(self._outputs(batch), quiet)

    def _outputs(self, batch: list[Any]) -> list[Any]:
        if self.batch_fn is not None:
            try:
                out = self.batch_fn(batch)
                return out if type(out) is list else list(out)
            except Exception:  # noqa: BLE001 - find the failing records one by one
                pass
        return each(self.ctx, self.node, batch, self.keyed, self.fn)


class KeyBy(_Function):
    """``key_by``: the batch into the downstream stage's `ShuffleOut` (`shuffle_out.py`),
    pre-aggregated per key there when that stage is combinable. Nothing in a replay: its
    shuffle records are committed already."""

    __slots__ = ("shuffle",)

    def __init__(self, ctx: StageContext, node: KeyByNode, keyed: bool) -> None:
        super().__init__(ctx, node, keyed)
        self.shuffle = ctx.shuffles[node.name]

    def apply(self, batch: list[Any], quiet: bool) -> None:
        fn = self.fn
        values = [v for _, v in batch] if self.keyed else batch
        # key_by(str) of plain strings (word count's words) keys each by itself.
        all_str = fn is str and set(map(type, values)) <= {str}
        try:
            keys = values if all_str else list(map(fn, values))
        except Exception:  # noqa: BLE001 - keep the records it could key
            pairs = each(self.ctx, self.node, values, False, lambda v: [(fn(v), v)], False)
            keys, values = [k for k, _ in pairs], [v for _, v in pairs]
        if not quiet:
            self.shuffle.add(keys, values, all_str)


class KeyByTimed(Operator):
    """``key_by`` of items with event time: shipped uncombined with it (or combined, into a
    stage that drops it)."""

    __slots__ = ("fn", "keyed", "shuffle")

    def __init__(self, ctx: StageContext, node: KeyByNode) -> None:
        super().__init__(ctx, node)
        assert node.parent is not None
        self.fn: Callable[[Any], Any] = node.fn
        self.keyed = node.parent.keyed
        self.shuffle = ctx.shuffles[node.name]

    def apply(self, batch: list[Any], quiet: bool) -> None:
        fn, keyed, node = self.fn, self.keyed, self.node
        keys: list[Any] = []
        values: list[Any] = []
        times: list[int] = []
        for first, value in batch:
            try:
                key = fn(value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self.ctx.fail(node, exc, value)
                continue
            keys.append(key)
            values.append(value)
            times.append(first[1] if keyed else first)
        if not quiet:
            self.shuffle.add(keys, values, times=times)


class StripTime(Operator):
    """Timed items into an operator that drops the time (aggregations, sinks)."""

    __slots__ = ("inner", "keyed")

    def __init__(self, ctx: StageContext, inner: Operator, keyed: bool) -> None:
        super().__init__(ctx, inner.node)
        self.inner, self.keyed = inner, keyed

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if self.keyed:
            self.inner.apply([(k[0], v) for k, v in batch], quiet)
        else:
            self.inner.apply([v for _, v in batch], quiet)


class StripTimeTouch(StripTime):
    """`StripTime` into an aggregation with a TTL (``expiry``, its deadlines): the keys'
    TTLs count from the records' event times (`processor.engine.ttl`)."""

    __slots__ = ("expiry",)

    def __init__(self, ctx: StageContext, inner: Operator, keyed: bool, expiry: Expiry) -> None:
        super().__init__(ctx, inner, keyed)
        self.expiry = expiry

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.expiry.touch_timed(first for first, _ in batch)
        super().apply(batch, quiet)


class StripMeta(Operator):
    """Items with metadata into a node that takes none (`metachain.strip`): given to
    ``inner``, the node's operator as if its parent made them without."""

    __slots__ = ("inner", "keyed", "timed")

    def __init__(self, ctx: StageContext, inner: Operator, parent: Node) -> None:
        super().__init__(ctx, inner.node)
        self.inner, self.keyed, self.timed = inner, parent.keyed, parent.timed

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.inner.apply(metachain.strip(batch, self.keyed, self.timed), quiet)


class WithMeta(Operator):
    """A map, filter, flat_map, key_by or ``process`` that takes items with metadata
    (`processor.engine.metachain`), from a parent that makes them or (``fresh``) from one
    that makes new records without, which get a meta of their key. ``inner``: the node's
    operator without metadata; a ``process`` takes the items itself (``run`` None)."""

    __slots__ = ("fresh", "inner", "keyed", "run", "timed")

    def __init__(self, ctx: StageContext, inner: Operator, parent: Node) -> None:
        super().__init__(ctx, inner.node)
        self.inner, self.timed = inner, parent.timed
        self.fresh = not parent.meta
        # Only records made by a keyed operator have no metadata.
        self.keyed = True if self.fresh else parent.keyed
        node = inner.node  # a process (no FunctionNode) takes them itself
        self.run = metachain.run_of(node) if isinstance(node, FunctionNode) else None

    def apply(self, batch: list[Any], quiet: bool) -> None:
        if self.fresh:
            batch = metachain.fresh(batch, self.timed)
        if self.run is None:
            self.inner.apply(batch, quiet)  # emits to this one's children
            return
        out = self.run(self.ctx, batch, self.keyed, quiet)
        if out is not None:
            self.emit(out, quiet)


def each(
    ctx: StageContext,
    node: Node,
    batch: list[Any],
    keyed: bool,
    fn: Callable[[Any], Iterable[Any]],
    fast: bool = True,
) -> list[Any]:
    """``fn`` over every value, flattened (keeping keys); a failing record is dead."""
    if fast:
        try:
            if keyed:
                return [(k, out) for k, v in batch for out in fn(v)]
            return list(flatten.from_iterable(map(fn, batch)))
        except Exception:  # noqa: BLE001 - find the failing records one by one
            pass
    result: list[Any] = []
    for item in batch:
        value = item[1] if keyed else item
        try:
            outs = list(fn(value))
        except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
            ctx.fail(node, exc, value)
            continue
        if keyed:
            result.extend((item[0], out) for out in outs)
        else:
            result.extend(outs)
    return result


class LocalKeyBy(Operator):
    """The ``key_by`` of a keyed source (`processor.api.keying`): its records' Kafka keys
    (``meta.key``) as the stream's key, the items on to the operators after it in this
    stage, in the form a keyed stage's head gives them (`processor.engine.shuffle_format`):
    ``((key text, meta), value)`` where those take metadata, else ``((key text, time),
    value)`` when timed, else ``(key text, value)``. A key with no text is dead."""

    __slots__ = ("form",)

    def __init__(self, ctx: StageContext, node: KeyByNode) -> None:
        super().__init__(ctx, node)
        self.form = "meta" if node.meta else "timed" if node.timed else "plain"

    def apply(self, batch: list[Any], quiet: bool) -> None:
        keys = [meta.key for meta, _ in batch]
        if set(map(type, keys)) <= {str} and TAGGED not in "".join(keys):
            texts: list[Any] = keys  # plain strings, each its own text (a C loop)
        else:
            texts, batch = self._texts(batch)
        form = self.form
        if form == "meta":
            items = [((t, m), v) for t, (m, v) in zip(texts, batch, strict=True)]
        elif form == "timed":
            items = [((t, m.timestamp), v) for t, (m, v) in zip(texts, batch, strict=True)]
        else:
            items = [(t, v) for t, (_, v) in zip(texts, batch, strict=True)]
        self.emit(items, quiet)

    def _texts(self, batch: list[Any]) -> tuple[list[str], list[Any]]:
        texts: list[str] = []
        kept: list[Any] = []
        for item in batch:
            try:
                texts.append(key_text(item[0].key))
            except RecordError as exc:
                self.ctx.fail(self.node, exc, item[1])
                continue
            kept.append(item)
        return texts, kept
