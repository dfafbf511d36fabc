"""The epoch's end of a stage's chain (`flush`): what its operators kept in memory during
the epoch goes into state in one write, and the aggregations' latest values on to their
children.

Each operator writes its own (`processor.engine.operators.keyed`): an aggregation's dirty
keys (stored and emitted, quietly in a replay); an ``emit="record"`` aggregation's keys
(emitted already); a ``process``'s cache (a deleted key as a deletion) and its timers
(`processor.engine.timers`); the windows' changed state; and the join's. Then the keys
expired by a TTL and the deadlines of the keys updated (`processor.engine.ttl`). A value
that cannot be stored is a dead record (`encode`), neither stored nor emitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.api.streams import Node
from processor.engine import ttl
from processor.engine.state_keys import state_prefix
from processor.engine.windows import DELETED, JoinOperator, WindowOperator
from processor.serde.codec import RecordError, sink_value

if TYPE_CHECKING:
    from processor.engine.chain import StageChain


def flush(chain: StageChain, quiet: bool = False) -> None:
    """The epoch's state of every operator of ``chain`` into its state backend, and the
    aggregations' latest values on to their children, in graph order. ``quiet``: a replay
    after a fallback, as the first run but with no output (dead records included: they
    were dead-lettered when the epoch first ran)."""
    dead = len(chain.dead)
    # Keys expired during the epoch (`processor.engine.ttl`): deleted, unless written again
    # below (a key that came back after it expired).
    writes: dict[bytes, bytes | None] = dict.fromkeys(chain._expired)
    # The aggregations first: what they emit may reach the others' state.
    for op in chain._aggregates:
        op.flush(writes, quiet)
    for keeper in chain._keepers:
        keeper.flush(writes)
    if chain._expiry:
        ttl.at_flush(chain, writes)
    chain._state.write(writes)
    chain._expired.clear()  # read as missing until now
    if quiet:
        del chain.dead[dead:]


def flush_timed(
    chain: StageChain, op: WindowOperator | JoinOperator, writes: dict[bytes, bytes | None]
) -> None:
    """A window's or the join's changed state into ``writes``."""
    prefix = state_prefix(op.node)
    for text, state in op.take_writes().items():
        key = prefix + text.encode()
        if state is DELETED:
            writes[key] = None
        else:
            raw = encode(chain, op.node, state)
            if raw is not None:
                writes[key] = raw


def encode(chain: StageChain, node: Node, value: Any) -> bytes | None:
    """A state value's bytes; None (and a dead record) if it cannot be stored."""
    try:
        return sink_value(value)
    except RecordError as exc:
        chain._dead(node, exc, value)
        return None
