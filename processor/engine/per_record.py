"""Aggregations with ``emit="record"``: an update per input record, emitted at once.

An aggregation that emits per checkpoint keeps each key's latest value of the epoch in a dirty
map and emits it once, at `StageChain.flush`. One that emits per record (`PerRecord`) folds
each record into its key's value and emits ``(key, new value)`` right away, in input order,
as ``process`` emits: the changelog of Kafka Streams without a cache, or of Flink. Its latest
values still reach state at flush only, so a snapshot holds each key's value after exactly
the records its checkpoint covers, and after a restore the updates continue from there (the
updates of the records after it are in no committed transaction, so none is repeated or
lost).

The stage that feeds it does not pre-aggregate (`Stage.combiner` is None for it): every
record arrives on its own, so every update is seen.

A record whose fold fails (a user function raising, a sum of a non-number, a ``reduce`` or
``aggregate`` result that JSON cannot store) is dead: its key keeps its value and no update
is emitted for it, so the key's sequence continues from the value before it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol

from processor.api.node import AggregateNode, AggregationNode, CountNode, ReduceNode
from processor.api.ops import TAGGED, UNSET, folder, load_value
from processor.api.streams import Node
from processor.engine.expiry import Expiry
from processor.serde.codec import sink_value

# Values that an update can share with the accumulator: nothing can change them later.
_IMMUTABLE = frozenset({int, float, str, bool, type(None)})
_FIRST = itemgetter(0)
# The most bytes a count's value takes as a sink record (a 64-bit count's digits, and more).
_DIGITS = 24


class _Reader(Protocol):
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...


class PerRecord:
    """One ``emit="record"`` aggregation of a stage task: its keys' latest values this epoch."""

    def __init__(
        self,
        node: AggregationNode,
        prefix: bytes,
        state: _Reader,
        dead: Callable[[Node, Exception, Any], None],
        expiry: Expiry | None = None,
    ) -> None:
        """``prefix``: of the node's keys in ``state``; ``dead(node, error, value)``: a
        record whose fold failed; ``expiry``: the node's TTL deadlines, if it has one."""
        self.node = node
        self._prefix = prefix
        self._state = state
        self._dead = dead
        self._count = isinstance(node, CountNode)
        # reduce and aggregate run user code whose result may be anything, or may be changed
        # in place by the next call: each result is checked (and copied) as it is made.
        self._checked = isinstance(node, ReduceNode | AggregateNode)
        self._fold = folder(node)
        self._expiry = expiry
        self.latest: dict[str, Any] = {}  # key text -> value after its last record so far
        self._raw: dict[str, bytes] = {}  # key text -> its sink record key (`count_records`)

    def __len__(self) -> int:
        return len(self.latest)

    def _load(self, texts: Any) -> None:
        """The keys of ``texts`` not in memory yet, from state (one multi_get)."""
        latest = self.latest
        missing = [t for t in texts if t not in latest]
        if missing:
            prefix = self._prefix
            raws = self._state.get_many([prefix + t.encode() for t in missing])
            for text, raw in zip(missing, raws, strict=True):
                latest[text] = UNSET if raw is None else load_value(raw)

    def count_records(
        self, batch: list[tuple[str, Any]], limit: int
    ) -> list[tuple[bytes, bytes]] | None:
        """A count's records folded in order, each update straight into the record of a
        sink with the defaults (key the key's text, value the count's digits: what
        `processor.engine.sink_batch.sink` makes of ``(key text, count)``), with no update
        item between. None, before anything is folded, when a key of the batch is not a
        plain UTF-8 string short enough for ``limit``: then `add` and the sink's own path."""
        distinct = dict.fromkeys(map(_FIRST, batch))
        raw = self._raw
        fresh = [t for t in distinct if t not in raw]
        if fresh:
            try:
                encoded = [t.encode() for t in fresh]
            except UnicodeEncodeError:
                return None
            if max(map(len, encoded)) + _DIGITS > limit or TAGGED in "".join(fresh):
                return None
            raw.update(zip(fresh, encoded, strict=True))
        if self._expiry is not None:  # updated now: its TTL counts from here
            self._expiry.touch_all(list(map(_FIRST, batch)))
        self._load(distinct)
        latest = self.latest
        out: list[tuple[bytes, bytes]] = []
        append = out.append
        for text, _ in batch:
            acc = latest[text]
            acc = latest[text] = 1 if acc is UNSET else acc + 1
            append((raw[text], b"%d" % acc))
        return out

    def add(self, batch: list[tuple[str, Any]]) -> list[Any]:
        """Fold ``(key text, value)`` records in order; their updates, ``(key text, new
        value)`` in the same order (a keyed batch, as ``process`` returns)."""
        latest = self.latest
        if self._expiry is not None:  # updated now: its TTL counts from here
            self._expiry.touch_all([t for t, _ in batch])
        self._load(dict.fromkeys(map(_FIRST, batch)))
        out: list[Any] = []
        append = out.append
        if self._count:
            for text, _ in batch:
                acc = latest[text]
                acc = latest[text] = 1 if acc is UNSET else acc + 1
                append((text, acc))
            return out
        fold, checked, node = self._fold, self._checked, self.node
        for text, value in batch:
            try:
                acc = fold(latest[text], value)
                update = acc
                if checked:
                    # Refused here, on the record that made it, not at the flush (where a
                    # whole epoch of the key's updates would be lost from state after being
                    # emitted); a copy, as an add() may change its accumulator in place.
                    raw = sink_value(acc)
                    if type(acc) not in _IMMUTABLE:
                        update = load_value(raw)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                self._dead(node, exc, value)
                continue
            latest[text] = acc
            append((text, update))
        return out

    def take(self) -> list[tuple[str, Any]]:
        """The keys' latest values, for state (a key whose every record failed has none);
        the epoch starts again from state."""
        items = [(t, v) for t, v in self.latest.items() if v is not UNSET]
        self.latest.clear()
        self._raw.clear()
        return items
