"""A batch of a stage's items into sink records, in its context's ``sinks`` and ``headed``
(`processor.engine.context`).

A sink with the defaults (key ``str(key)``, value JSON, no headers) takes `sink`: the whole
batch encoded in C loops and its size checked by a bound (`_fit`), record by record only
when that fails, so that only the failing records are dead. A sink with options encodes
through `processor.api.sinks` (`sink_spec`). Records a window or join got after its
watermark go to the job's late topic (`late`).
"""

from __future__ import annotations

from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any

from processor.api.node import SinkNode
from processor.api.ops import TAGGED, oversized, sink_key_of
from processor.api.sinks import SinkSpec
from processor.api.sinks import encode as encode_sink
from processor.api.streams import Node
from processor.engine.context import StageContext
from processor.engine.windows import Item
from processor.serde.codec import RecordError, sink_value, sink_values

_KEY, _VALUE = itemgetter(0), itemgetter(1)


def sink(ctx: StageContext, node: SinkNode, batch: list[Any], keyed: bool) -> None:
    """``batch`` into the records of ``node``, a sink with the defaults."""
    records = ctx.sinks.setdefault(node.topic, [])
    start = len(records)
    limit = ctx.max_record
    try:
        if keyed:
            # A plain string key's text is itself.
            keys = [t.encode() if t[:1] != TAGGED else sink_key_of(t) for t, _ in batch]
            records.extend(zip(keys, sink_values(list(map(_VALUE, batch))), strict=True))
        else:
            records.extend(zip(repeat(None), sink_values(batch)))
        if _fit(records, start, keyed, limit):
            return
    except (RecordError, ValueError, RecursionError):
        pass
    del records[start:]  # extend() keeps what it appended before a failure
    for item in batch:
        value = item[1] if keyed else item
        try:
            key = sink_key_of(item[0]) if keyed else None
            raw = sink_value(value)
        except RecordError as exc:
            ctx.fail(node, exc, value)
            continue
        size = len(raw) + (len(key) if key is not None else 0)
        if size > limit:
            ctx.fail(node, oversized(size, limit), value)
            continue
        records.append((key, raw))


def sink_spec(
    ctx: StageContext, node: SinkNode, spec: SinkSpec, batch: list[Any], keyed: bool
) -> None:
    """A sink with a key function, a value format or headers (`processor.api.sinks`)."""
    plain, headed = encode_sink(spec, batch, keyed, ctx.max_record, partial(ctx.fail, node))
    if plain:
        ctx.sinks.setdefault(node.topic, []).extend(plain)
    if headed:
        ctx.headed.setdefault(node.topic, []).extend(headed)


def late(ctx: StageContext, node: Node, late: list[Item], quiet: bool) -> None:
    """Records a window or join got after its watermark: to ``<job>.late``, counted."""
    if not late or quiet:
        return
    ctx.late[node.name] += len(late)
    records = ctx.sinks.setdefault(ctx.late_topic, [])
    limit = ctx.max_record
    for (text, _), value in late:
        try:
            key, raw = sink_key_of(text), sink_value(value)
        except RecordError as exc:
            ctx.fail(node, exc, value)
            continue
        if len(key) + len(raw) > limit:
            ctx.fail(node, oversized(len(key) + len(raw), limit), value)
            continue
        records.append((key, raw))


def _fit(records: list[tuple[bytes | None, bytes]], start: int, keyed: bool, limit: int) -> bool:
    """Whether every record from ``start`` on is at most ``limit`` bytes (a bound from the
    largest key and value, in C loops; exact per record only if it fails)."""
    new = records[start:] if start else records
    if not new:
        return True
    largest = max(map(len, map(_VALUE, new)))
    if keyed:
        largest += max(map(len, map(_KEY, new)))
    return largest <= limit
