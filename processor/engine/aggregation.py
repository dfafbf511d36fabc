"""The epoch's aggregations in a stage's chain (count, sum, reduce, aggregate with
``emit="checkpoint"``, the operator `processor.engine.operators.keyed.Aggregate`): each
key's latest value of the epoch in the operator's dirty map (`fold`), loaded from state on
first touch; at the flush (`flush`) into state and on to the operator's children, and for
an aggregation whose only child is a sink encoded once for its state and its record
(`flush_into_sink`, word count's path).

A replay after a fallback restore folds and flushes as the first run did, quietly: its
updates reach the operators after the aggregation (their state must be rebuilt too), and no
sink or shuffle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from processor.api.ops import TAGGED, UNSET, load_value
from processor.api.streams import Node
from processor.engine import sink_batch, state_flush
from processor.engine.state_keys import state_prefix
from processor.serde.codec import RecordError

if TYPE_CHECKING:
    from processor.engine.chain import StageChain
    from processor.engine.operators.keyed import Aggregate


def fold(
    op: Aggregate,
    batch: list[tuple[str, Any]],
    fold: Callable[[Any, Any], Any],
    add: str | None = None,
    unique: bool = False,
) -> None:
    """``batch`` folded into ``op``'s dirty map (a key missing from it is loaded from state
    first). ``add``: "count" or "sum" when ``fold`` is that (folded inline, the same
    arithmetic); ``unique``: the batch's keys are distinct (a combined record).

    A replay after a fallback folds exactly as the first run did: whether the epoch's output
    goes out is decided at `flush`, so what follows the aggregation sees the same updates."""
    chain, node = op.chain, op.node
    dirty = op.dirty
    expiry = op.untimed  # its TTL, where its records come without their event time
    if expiry is not None:  # updated now: its TTL counts from here
        expiry.touch_all([t for t, _ in batch])
    if unique:
        missing = [t for t, _ in batch if t not in dirty]
    else:
        missing = [t for t in dict.fromkeys(t for t, _ in batch) if t not in dirty]
    if missing:
        prefix = state_prefix(node)
        raws = chain._reader.get_many([prefix + t.encode() for t in missing])
        for text, raw in zip(missing, raws, strict=True):
            dirty[text] = UNSET if raw is None else load_value(raw)
    failed = False
    if add == "count":
        for text, _ in batch:
            acc = dirty[text]
            dirty[text] = 1 if acc is UNSET else acc + 1
    elif add == "sum":
        for text, value in batch:
            acc = dirty[text]
            if type(value) is not int and type(value) is not float:
                failed = True  # a sum of numbers only: see ops._addend
                chain._dead(node, RecordError(f"not a number: sum of {value!r:.80}"), value)
                continue
            dirty[text] = value if acc is UNSET else acc + value
    else:
        for text, value in batch:
            try:
                dirty[text] = fold(dirty[text], value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead
                failed = True
                chain._dead(node, exc, value)
    if not failed:
        return  # every key that was missing now has a value
    for text in missing:
        if dirty.get(text, None) is UNSET:
            del dirty[text]  # every value for it failed: nothing to store or emit


def flush(op: Aggregate, writes: dict[bytes, bytes | None], quiet: bool) -> None:
    """``op``'s values of the epoch into ``writes`` and on to its children, in the order the
    keys were first updated (a value that cannot be stored is dead: neither). ``quiet``: a
    replay, whose output is committed already; the children update their state all the same
    (a ``process`` or a ``reduce`` after this aggregation must see what it saw the first
    time), and sinks and shuffles drop it."""
    chain, node = op.chain, op.node
    prefix = state_prefix(node)
    dirty = op.dirty
    if not dirty:
        return
    items = list(dirty.items())
    dirty.clear()
    if op.plain_sink is not None:
        if quiet:  # a sink drops a quiet update: the state alone
            _stored(chain, node, prefix, items, writes)
        else:
            flush_into_sink(chain, node, prefix, items, op.plain_sink, writes)
        return
    emitted = _stored(chain, node, prefix, items, writes)
    op.emit(emitted, quiet)


def _stored(
    chain: StageChain,
    node: Node,
    prefix: bytes,
    items: list[tuple[str, Any]],
    writes: dict[bytes, bytes | None],
) -> list[tuple[str, Any]]:
    """``items`` into ``writes``; those that could be encoded (the others are dead)."""
    kept = []
    for text, value in items:
        raw = state_flush.encode(chain, node, value)
        if raw is not None:
            writes[prefix + text.encode()] = raw
            kept.append((text, value))
    return kept


def flush_into_sink(
    chain: StageChain,
    node: Node,
    prefix: bytes,
    items: list[tuple[str, Any]],
    sink: Node,
    writes: dict[bytes, bytes | None],
) -> None:
    """An aggregation's changelog whose only child is a sink (word count's counts): a
    plain-string key with an int value is encoded once for its state and its record, what
    the general path (state, then `sink_batch.sink`) gives in two passes."""
    records: list[tuple[bytes | None, bytes]] = []
    append = records.append
    rest: list[tuple[str, Any]] = []
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
        stored = state_flush.encode(chain, node, value)
        if stored is not None:  # else dead: neither stored nor emitted
            writes[prefix + text.encode()] = stored
            rest.append((text, value))
    if records:
        chain.sinks.setdefault(sink.topic, []).extend(records)
    if rest:
        sink_batch.sink(chain, sink, rest, keyed=True)
