"""The operators that keep state per key: the aggregations (count, sum, reduce, aggregate;
`Aggregate` per checkpoint, `PerRecordAggregate` with ``emit="record"``), ``process`` and the
per-window ones (`Window`: an aggregation or ``process`` under a window), and the join
(`Join`, the head of its stage). Each owns its
epoch's state (and ``process`` its timers) and writes it at the epoch's end (`flush`, called
by `processor.engine.state_flush`). An aggregation with ``ttl_ms`` and every ``process``
own their keys' TTL deadlines too (``expiry``, `processor.engine.ttl`): they touch them as
keys are updated and drop what expires from their memory (``expire``).

Their input is keyed, ``(key text, value)`` (with the time, ``((key text, time), value)``,
where they keep it: ``process`` and windows).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from processor.api.ops import UNSET, folder
from processor.api.streams import Node
from processor.engine import aggregation, process_op, sink_batch, state_flush, ttl
from processor.engine.operators.base import Operator
from processor.engine.per_record import PerRecord
from processor.engine.state_keys import state_prefix
from processor.engine.timers import ProcessTimers, timers_prefix
from processor.engine.windows import Item, JoinOperator, WindowOperator
from processor.serde.codec import sink_value

if TYPE_CHECKING:
    from processor.engine.chain import StageChain

Writes = dict[bytes, bytes | None]  # the epoch's state write: key -> value (None: deleted)


class Aggregate(Operator):
    """An aggregation with ``emit="checkpoint"``: each key's latest value of the epoch
    (`processor.engine.aggregation.fold`), into state and on to the children at `flush`."""

    __slots__ = ("add", "dirty", "expiry", "fold", "plain_sink", "untimed")

    def __init__(self, chain: StageChain, node: Node) -> None:
        super().__init__(chain, node)
        self.fold = folder(node)
        # count and sum fold inline (no call per value): the word count path.
        self.add = node.kind if node.kind in ("count", "sum") else None
        # Key text -> latest value this epoch: stored and emitted at flush.
        self.dirty: dict[str, Any] = {}
        # Its only child, if that is a sink with the defaults (word count's): see
        # `aggregation.flush_into_sink`.
        only = node.children[0] if len(node.children) == 1 else None
        plain = only is not None and only.kind == "sink" and only.sink_spec is None
        self.plain_sink = only if plain else None
        # Its TTL deadlines (None: no ``ttl_ms``), and those touched as keys fold: where its
        # records come without their event time (else by its input, `StripTimeTouch`).
        self.expiry = ttl.of(chain, node)
        self.untimed = ttl.untimed(node, self.expiry)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        del quiet  # the flush decides: see `aggregation.flush`
        aggregation.fold(self, batch, self.fold, self.add)

    def combine(self, partials: dict[str, Any], quiet: bool, merge: Callable[..., Any]) -> None:
        """A combined shuffle record's partials, merged by ``merge`` (partial counts and sums
        by addition, like a sum's values)."""
        del quiet  # the flush decides: see `aggregation.flush`
        add = "sum" if self.add is not None else None
        aggregation.fold(self, list(partials.items()), merge, add, unique=True)

    def flush(self, writes: Writes, quiet: bool = False) -> None:
        """The epoch's values into ``writes`` and on to the children (quietly in a replay)."""
        aggregation.flush(self, writes, quiet)

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


class PerRecordAggregate(Operator):
    """An aggregation with ``emit="record"`` (`processor.engine.per_record`): an update per
    record, on at once as ``process``'s output; quietly in a replay (state only downstream
    too)."""

    __slots__ = ("expiry", "latest")

    def __init__(self, chain: StageChain, node: Node) -> None:
        super().__init__(chain, node)
        self.expiry = ttl.of(chain, node)  # its TTL deadlines (None: no ttl_ms)
        self.latest = PerRecord(
            node,
            state_prefix(node),
            ttl.reader(chain, self.expiry),
            chain._dead,
            ttl.untimed(node, self.expiry),
        )

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(self.latest.add(batch), quiet)

    def flush(self, writes: Writes) -> None:
        """The keys' latest values into ``writes`` (emitted already: state only)."""
        prefix, node = state_prefix(self.node), self.node
        for text, value in self.latest.take():
            raw = state_flush.encode(self.chain, node, value)
            if raw is not None:
                writes[prefix + text.encode()] = raw

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of the latest values (emitted already: nothing to emit)."""
        del quiet
        latest = self.latest.latest
        for text in texts:
            latest.pop(text, None)


class Process(Operator):
    """``process`` (not per window): record by record with a state handle per key
    (`processor.engine.process_op`); its output flows on at once, keeping the time. Owns
    its epoch cache (key text -> value, `process_op.DELETED` for a deleted key) and, with an
    ``on_timer``, its timers (`processor.engine.timers`); and its keys' TTL deadlines
    (``state.set(value, ttl_ms=...)`` may come, with or without its ``ttl_ms``)."""

    __slots__ = ("cache", "expiry", "load", "timers")

    def __init__(self, chain: StageChain, node: Node) -> None:
        super().__init__(chain, node)
        self.cache: dict[str, Any] = {}
        self.load = partial(chain._load, node)
        self.timers = ProcessTimers(node) if node.on_timer is not None else None
        self.expiry = ttl.of(chain, node)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(process_op.process_batch(self.chain, self.node, batch), quiet)

    def advance(self, mark: int, before: int, quiet: bool) -> None:
        """Its input's watermark rose from ``before`` to ``mark``: the event-time timers it
        passed fire (`process_op.fire_timers`)."""
        process_op.fire_timers(self.chain, self.node, mark - 1, before, quiet)

    def flush(self, writes: Writes) -> None:
        """The cache into ``writes`` (a deleted key as a deletion), and the timers."""
        prefix, node = state_prefix(self.node), self.node
        for text, value in self.cache.items():
            if value is process_op.DELETED:
                writes[prefix + text.encode()] = None
            elif value is not UNSET:
                raw = state_flush.encode(self.chain, node, value)
                if raw is not None:
                    writes[prefix + text.encode()] = raw
        self.cache.clear()
        if self.timers is not None:
            prefix = timers_prefix(node)
            for text, times in self.timers.take_writes().items():
                writes[prefix + text.encode()] = None if times is None else sink_value(times)

    def expire(self, texts: list[str], quiet: bool) -> None:
        """Expired keys out of the cache (their timers stay: they are the user's)."""
        del quiet
        cache = self.cache
        for text in texts:
            cache.pop(text, None)


class Window(Operator):
    """An aggregation or ``process`` per window (`processor.engine.windows`): records go
    into their windows at once; what they close (and what the watermark closes, in `advance`)
    flows on. Records behind the watermark are late (`sink_batch.late`)."""

    __slots__ = ("windows",)

    def __init__(self, chain: StageChain, node: Node) -> None:
        super().__init__(chain, node)
        self.windows = WindowOperator(node, partial(chain._load, node), chain._dead)

    def apply(self, batch: list[Any], quiet: bool) -> None:
        late: list[Item] = []
        out = self.windows.add(batch, self.chain._marks[self.node], late)
        sink_batch.late(self.chain, self.node, late, quiet)
        if out:  # quietly in a replay: what follows rebuilds its state from it
            self.emit(out, quiet)

    def advance(self, mark: int, before: int, quiet: bool) -> None:
        """Its input's watermark rose to ``mark``: the windows it closed flow on."""
        del before  # a window closes by the watermark alone
        out = self.windows.fire(mark)
        if out:
            self.emit(out, quiet)

    def flush(self, writes: Writes) -> None:
        """The windows' changed state into ``writes``."""
        state_flush.flush_timed(self.chain, self.windows, writes)


class Join(Operator):
    """The head of a join stage (`processor.engine.windows.JoinOperator`): records of
    either input (`add`) meet those of the other within its bound, and the pairs flow on;
    records that can meet nothing any more expire as the watermark rises."""

    __slots__ = ("join",)

    def __init__(self, chain: StageChain, node: Node) -> None:
        super().__init__(chain, node)
        self.join = JoinOperator(node, partial(chain._load, node))

    def apply(self, batch: list[Any], quiet: bool) -> None:
        self.emit(batch, quiet)  # what the stage's head emits: the joined pairs

    def add(self, side: int, items: list[Item], quiet: bool) -> None:
        """Items of the left (``side`` 0) or right (1) input, timed and keyed; those behind
        the watermark are late (`sink_batch.late`)."""
        late: list[Item] = []
        out = self.join.add(side, items, self.chain.watermark, late)
        sink_batch.late(self.chain, self.node, late, quiet)
        if out:  # quietly in a replay: what follows rebuilds its state from it
            self.emit(out, quiet)

    def flush(self, writes: Writes) -> None:
        """The join's changed state into ``writes``."""
        state_flush.flush_timed(self.chain, self.join, writes)
