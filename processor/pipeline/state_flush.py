"""The epoch's end of a stage's chain (`flush`): what its operators kept in memory during
the epoch goes into state in one write, and the aggregations' latest values on to their
children.

Per operator: an aggregation's dirty keys (stored and emitted) and quiet ones (stored only);
an ``emit="record"`` aggregation's keys (emitted already); a ``process``'s cache (a deleted
key as a deletion); the windows' and the join's changed state; the timers of ``process``
(`processor.pipeline.timers`); the keys expired by a TTL and the deadlines of the keys updated
(`processor.pipeline.ttl`). A value that cannot be stored is a dead record (`encode`),
neither stored nor emitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.pipeline import aggregation, ttl
from processor.pipeline.api import Node
from processor.pipeline.ops import UNSET
from processor.pipeline.process_op import DELETED
from processor.pipeline.state_keys import state_prefix
from processor.pipeline.timers import timers_prefix
from processor.pipeline.windows import DELETED as STATE_DELETED
from processor.pipeline.windows import JoinOperator, WindowOperator
from processor.serde.codec import RecordError, sink_value

if TYPE_CHECKING:
    from processor.pipeline.chain import StageChain


def flush(chain: StageChain) -> None:
    """The epoch's state of every operator of ``chain`` into its state backend, and the
    aggregations' latest values on to their children, in graph order."""
    # Keys expired during the epoch (`processor.pipeline.ttl`): deleted, unless written again
    # below (a key that came back after it expired).
    writes: dict[bytes, bytes | None] = dict.fromkeys(chain._expired)
    for node, dirty in chain._dirty.items():
        prefix = state_prefix(node)
        quiet = chain._quiet[node]
        for text, value in quiet.items():
            if text not in dirty:
                raw = encode(chain, node, value)
                if raw is not None:
                    writes[prefix + text.encode()] = raw
        quiet.clear()
        if not dirty:
            continue
        items = list(dirty.items())
        dirty.clear()
        sink = node.children[0] if len(node.children) == 1 else None
        if sink is not None and sink.kind == "sink" and sink.sink_spec is None:
            aggregation.flush_into_sink(chain, node, prefix, items, sink, writes)
            continue
        emitted = []
        for text, value in items:
            raw = encode(chain, node, value)
            if raw is not None:  # else dead: neither stored nor emitted
                writes[prefix + text.encode()] = raw
                emitted.append((text, value))
        chain._push(node, emitted, quiet=False)
    for node, per_record in chain._per_record.items():  # emitted already: state only
        prefix = state_prefix(node)
        for text, value in per_record.take():
            raw = encode(chain, node, value)
            if raw is not None:
                writes[prefix + text.encode()] = raw
    for node, cache in chain._process.items():
        prefix = state_prefix(node)
        for text, value in cache.items():
            if value is DELETED:
                writes[prefix + text.encode()] = None
            elif value is not UNSET:
                raw = encode(chain, node, value)
                if raw is not None:
                    writes[prefix + text.encode()] = raw
        cache.clear()
    timed: list[WindowOperator | JoinOperator] = list(chain._windows.values())
    if chain._join is not None:
        timed.append(chain._join)
    for op in timed:
        prefix = state_prefix(op.node)
        for text, state in op.take_writes().items():
            key = prefix + text.encode()
            if state is STATE_DELETED:
                writes[key] = None
            else:
                raw = encode(chain, op.node, state)
                if raw is not None:
                    writes[key] = raw
    for node, timers in chain._timers.items():
        prefix = timers_prefix(node)
        for text, times in timers.take_writes().items():
            writes[prefix + text.encode()] = None if times is None else sink_value(times)
    if chain._expiry:
        ttl.at_flush(chain, writes)
    chain._state.write(writes)
    chain._expired.clear()  # read as missing until now


def encode(chain: StageChain, node: Node, value: Any) -> bytes | None:
    """A state value's bytes; None (and a dead record) if it cannot be stored."""
    try:
        return sink_value(value)
    except RecordError as exc:
        chain._dead(node, exc, value)
        return None
