"""The aggregations (count, sum, reduce, aggregate): `Aggregate` with ``emit="checkpoint"``,
`PerRecordAggregate` with ``emit="record"`` (`processor.engine.per_record`).

An ``emit="checkpoint"`` aggregation keeps each key's latest value of the epoch in its dirty
map (`Aggregate.apply`), loaded from state on first touch; at the flush (`Aggregate.flush`)
into state and on to its children, and where its only child is a sink encoded once for its
state and its record (word count's path). A replay after a fallback restore folds and
flushes as the first run did, quietly: its updates reach the operators after the
aggregation (their state must be rebuilt too), and no sink or shuffle.

Both own their keys' TTL deadlines where they have a ``ttl_ms`` (``expiry``,
`processor.engine.ttl`): touched as keys fold, and what expires leaves their memory
(``expire``). Their input is keyed, ``(key text, value)``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from processor.api.node import AggregationNode, CountNode, SinkNode, SumNode
from processor.api.ops import TAGGED, UNSET, folder, load_value
from processor.engine import sink_batch
from processor.engine.context import StageContext
from processor.engine.expiry import expiry_of, untimed
from processor.engine.operators.base import Operator
from processor.engine.per_record import PerRecord
from processor.engine.state_keys import state_prefix
from processor.serde.codec import RecordError

Writes = dict[bytes, bytes | None]  # the epoch's state write: key -> value (None: deleted)
_FIRST = itemgetter(0)


class Aggregate(Operator):
    """An aggregation with ``emit="checkpoint"``: each key's latest value of the epoch, into
    state and on to the children at `flush`."""

    __slots__ = ("add", "dirty", "expiry", "fold", "plain_sink", "prefix", "untimed")
    node: AggregationNode

    def __init__(self, ctx: StageContext, node: AggregationNode) -> None:
        super().__init__(ctx, node)
        self.fold = folder(node)
        self.prefix = state_prefix(node)
        # count and sum fold inline (no call per value): the word count path.
        self.add = node.kind if isinstance(node, CountNode | SumNode) else None
        # Key text -> latest value this epoch: stored and emitted at flush.
        self.dirty: dict[str, Any] = {}
        # Its only child, if that is a sink with the defaults (word count's): see
        # `_flush_into_sink`.
        only = node.children[0] if len(node.children) == 1 else None
        self.plain_sink = only if isinstance(only, SinkNode) and only.sink_spec is None else None
        # Its TTL deadlines (None: no ``ttl_ms``), and those touched as keys fold: where its
        # records come without their event time (else by its input, `StripTimeTouch`).
        self.expiry = expiry_of(node, ctx.timed)
        self.untimed = untimed(node, self.expiry)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        del quiet  # the flush decides: see `flush`
        self._fold(batch, self.fold, self.add)

    def combine(self, partials: dict[str, Any], quiet: bool, merge: Callable[..., Any]) -> None:
        """A combined shuffle record's partials, merged by ``merge`` (partial counts and sums
        by addition, like a sum's values)."""
        del quiet  # the flush decides: see `flush`
        add = "sum" if self.add is not None else None
        self._fold(list(partials.items()), merge, add, unique=True)

    def _fold(
        self,
        batch: list[tuple[str, Any]],
        fold: Callable[[Any, Any], Any],
        add: str | None = None,
        unique: bool = False,
    ) -> None:
        """``batch`` folded into the dirty map (a key missing from it is loaded from state
        first). ``add``: "count" or "sum" when ``fold`` is that (folded inline, the same
        arithmetic); ``unique``: the batch's keys are distinct (a combined record).

        A replay after a fallback folds exactly as the first run did: whether the epoch's
        output goes out is decided at `flush`, so what follows sees the same updates."""
        dirty = self.dirty
        if self.untimed is not None:  # updated now: its TTL counts from here
            self.untimed.touch_all([t for t, _ in batch])
        if unique:
            missing = [t for t, _ in batch if t not in dirty]
        else:
            missing = [t for t in dict.fromkeys(map(_FIRST, batch)) if t not in dirty]
        if missing:
            prefix = self.prefix
            raws = self.ctx.reader.get_many([prefix + t.encode() for t in missing])
            for text, raw in zip(missing, raws, strict=True):
                dirty[text] = UNSET if raw is None else load_value(raw)
        if add == "count":
            for text, _ in batch:
                acc = dirty[text]
                dirty[text] = 1 if acc is UNSET else acc + 1
            return  # a count cannot fail
        failed = self._sum(batch) if add == "sum" else self._fold_each(batch, fold)
        if failed:
            for text in missing:
                if dirty.get(text, None) is UNSET:
                    del dirty[text]  # every value for it failed: nothing to store or emit

    def _sum(self, batch: list[tuple[str, Any]]) -> bool:
        """A sum's batch (numbers only: see ops._addend); whether a record failed."""
        dirty, failed = self.dirty, False
        for text, value in batch:
            acc = dirty[text]
            if type(value) is not int and type(value) is not float:
                failed = True
                self.ctx.fail(self.node, RecordError(f"not a number: sum of {value!r:.80}"), value)
                continue
            dirty[text] = value if acc is UNSET else acc + value
        return failed

    def _fold_each(self, batch: list[tuple[str, Any]], fold: Callable[[Any, Any], Any]) -> bool:
        """A batch through a user's fold; whether a record failed (a dead record)."""
        dirty, failed = self.dirty, False
        for text, value in batch:
            try:
                dirty[text] = fold(dirty[text], value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead
                failed = True
                self.ctx.fail(self.node, exc, value)
        return failed

    def flush(self, writes: Writes, quiet: bool = False) -> None:
        """The epoch's values into ``writes`` and on to the children, in the order the keys
        were first updated (a value that cannot be stored is dead: neither). ``quiet``: a
        replay, whose output is committed already; the children update their state all the
        same (a ``process`` or a ``reduce`` after this aggregation must see what it saw the
        first time), and sinks and shuffles drop it."""
        dirty = self.dirty
        if not dirty:
            return
        items = list(dirty.items())
        dirty.clear()
        if self.plain_sink is not None:
            if quiet:  # a sink drops a quiet update: the state alone
                self._stored(items, writes)
            else:
                self._flush_into_sink(items, self.plain_sink, writes)
            return
        self.emit(self._stored(items, writes), quiet)

    def _stored(self, items: list[tuple[str, Any]], writes: Writes) -> list[tuple[str, Any]]:
        """``items`` into ``writes``; those that could be encoded (the others are dead)."""
        kept = []
        prefix = self.prefix
        for item, raw in zip(items, self.ctx.encode_all(self.node, items), strict=True):
            if raw is not None:
                writes[prefix + item[0].encode()] = raw
                kept.append(item)
        return kept

    def _flush_into_sink(
        self, items: list[tuple[str, Any]], sink: SinkNode, writes: Writes
    ) -> None:
        """The changelog into state and its only child, a sink (word count's counts): a
        plain-string key with an int value is encoded once for its state and its record,
        what the general path (state, then `sink_batch.sink`) gives in two passes."""
        records: list[tuple[bytes | None, bytes]] = []
        append = records.append
        rest: list[tuple[str, Any]] = []
        prefix, node, ctx = self.prefix, self.node, self.ctx
        for text, value in items:
            if type(value) is int and text[:1] != TAGGED:
                try:
                    raw, encoded = text.encode(), b"%d" % value
                except ValueError:  # an int of over 4,300 digits: the general path refuses it
                    pass
                else:
                    writes[prefix + raw] = encoded
                    append((raw, encoded))
                    continue
            stored = ctx.encode(node, text, value)
            if stored is not None:  # else dead: neither stored nor emitted
                writes[prefix + text.encode()] = stored
                rest.append((text, value))
        if records:
            ctx.sinks.setdefault(sink.topic, []).extend(records)
        if rest:
            sink_batch.sink(ctx, sink, rest, keyed=True)

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of the epoch's map; a pending update on to the children first
        (the last value of its changelog; quietly in a replay, as the first run did)."""
        dirty = self.dirty
        last: list[Any] = []
        for text in texts:
            value = dirty.pop(text, UNSET)
            if value is not UNSET:
                last.append((text, value))
        if last:  # the pending update of the changelog, before the key goes
            self.emit(last, quiet)

    def held(self, text: str) -> Any:
        """The key's value of this epoch (`UNSET`: not in memory)."""
        return self.dirty.get(text, UNSET)


class PerRecordAggregate(Operator):
    """An aggregation with ``emit="record"`` (`processor.engine.per_record`): an update per
    record, on at once as ``process``'s output; quietly in a replay (state only downstream
    too)."""

    __slots__ = ("expiry", "latest", "sink_topic")

    def __init__(self, ctx: StageContext, node: AggregationNode) -> None:
        super().__init__(ctx, node)
        # A count whose only child is a sink with the defaults (word count's emit="record"):
        # its updates go into that sink's records in the fold loop (`PerRecord.count_records`).
        only = node.children[0] if len(node.children) == 1 else None
        plain = isinstance(node, CountNode) and isinstance(only, SinkNode) and not only.sink_spec
        self.sink_topic = only.topic if plain and isinstance(only, SinkNode) else None
        self.expiry = expiry_of(node, ctx.timed)  # its TTL deadlines (None: no ttl_ms)
        self.latest = PerRecord(
            node,
            state_prefix(node),
            ctx.state if self.expiry is None else ctx.filtered(),
            ctx.fail,
            untimed(node, self.expiry),
        )

    def apply(self, batch: list[Any], quiet: bool) -> None:
        topic = self.sink_topic
        if topic is not None and not quiet:  # a sink drops a quiet update: the general path
            records = self.latest.count_records(batch, self.ctx.max_record)
            if records is not None:
                self.ctx.sinks.setdefault(topic, []).extend(records)
                return
        self.emit(self.latest.add(batch), quiet)

    def flush(self, writes: Writes) -> None:
        """The keys' latest values into ``writes`` (emitted already: state only)."""
        prefix, items = state_prefix(self.node), self.latest.take()
        for (text, _), raw in zip(items, self.ctx.encode_all(self.node, items), strict=True):
            if raw is not None:
                writes[prefix + text.encode()] = raw

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of the latest values (emitted already: nothing to emit)."""
        del quiet
        latest = self.latest.latest
        for text in texts:
            latest.pop(text, None)

    @property
    def pending(self) -> int:
        """Keys it holds for the flush."""
        return len(self.latest.latest)
